"""unilab.data: the episode store (zarr v3) and reading it for learning.

    from unilab.data import EpisodeStore, StoreSchema
    schema = StoreSchema.build(obs={"policy": 48}, action=12, images={"front": (64, 64)})
    with EpisodeStore.create("runs/demo.zarr", schema) as store:
        store.append_episode(frames, {"task": "reach", "fps": 50})

See docs/decisions/0005-episode-store.md for the layout and the commit protocol.
"""

from __future__ import annotations

from unilab.data.episode import EpisodeMeta
from unilab.data.errors import (
    EpisodeLengthError,
    EpisodeStoreError,
    MissingDataError,
    NotAStoreError,
    ReadOnlyStoreError,
    SchemaMismatchError,
    StoreLockedError,
)
from unilab.data.repair import RepairReport, repair
from unilab.data.schema import ORIGINS, SEGMENTS, FieldSpec, StoreSchema
from unilab.data.store import EpisodeStore
from unilab.data.validate import Problem, info, validate
from unilab.data.writer import EpisodeWriter

__all__ = [
    "ORIGINS",
    "SEGMENTS",
    "EpisodeLengthError",
    "EpisodeMeta",
    "EpisodeStore",
    "EpisodeStoreError",
    "EpisodeWriter",
    "FieldSpec",
    "MissingDataError",
    "NotAStoreError",
    "Problem",
    "ReadOnlyStoreError",
    "RepairReport",
    "SchemaMismatchError",
    "StoreLockedError",
    "StoreSchema",
    "info",
    "repair",
    "validate",
]
