"""Errors raised by the episode store. Each names the path or field and what would be valid."""

from __future__ import annotations


class EpisodeStoreError(Exception):
    """Base class for episode-store errors."""


class NotAStoreError(EpisodeStoreError):
    """A path that is not an episode store (or whose root metadata cannot be read)."""


class SchemaMismatchError(EpisodeStoreError, ValueError):
    """Data or a schema that does not match the store's schema."""


class EpisodeLengthError(EpisodeStoreError, ValueError):
    """An episode whose fields disagree on the number of frames, or that has none."""


class StoreLockedError(EpisodeStoreError):
    """Another process holds the store's writer lock."""


class ReadOnlyStoreError(EpisodeStoreError):
    """A write through a store opened with mode 'r'."""


class MissingDataError(EpisodeStoreError):
    """Committed frames whose stored chunk is gone (or whose field repair quarantined):
    reading them would return fill values, so the read raises instead. The message names
    the field, the frames and the episodes."""
