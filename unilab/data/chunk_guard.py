"""A zarr LocalStore for reading committed data that notices chunk files that are gone.

zarr treats a missing chunk file as "never written" and returns the fill value, so a chunk
deleted from disk would read back as NaN or sentinel values. `GuardedLocalStore` returns
the same `None` to zarr (raising inside zarr's asyncio gather leaves pending tasks behind)
but records which chunk it did not find; after each read `EpisodeStore` asks whether any
chunk that read needed is among them, and raises `MissingDataError` naming the field and
the episodes. The record is never consumed, so concurrent reads in several threads each
see their own misses; a recorded chunk whose file exists again is not reported.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zarr.storage import LocalStore

_CHUNK_KEY = re.compile(r"^(?P<array>.+)/c/(?P<first>\d+)((/\d+)*)$")


class GuardedLocalStore(LocalStore):
    """LocalStore that remembers every chunk it was asked for and did not find."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._missing: dict[str, dict[int, str]] = {}  # array -> chunk index -> key
        self._missing_lock = threading.Lock()

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        buf = await super().get(key, prototype, byte_range)
        if buf is None:
            match = _CHUNK_KEY.match(key)
            if match is not None:
                with self._missing_lock:
                    chunks = self._missing.setdefault(match.group("array"), {})
                    chunks[int(match.group("first"))] = key
        return buf

    def missing_among(self, array: str, chunks: Iterable[int]) -> list[int]:
        """Which of `chunks` (indices along frames) of `array` a read found missing and
        whose file is still missing."""
        with self._missing_lock:
            known = dict(self._missing.get(array, {}))
        if not known:
            return []
        out = []
        for c in sorted(set(chunks) & set(known)):
            if (Path(str(self.root)) / known[c]).exists():
                with self._missing_lock:  # written again since: not missing any more
                    self._missing.get(array, {}).pop(c, None)
            else:
                out.append(c)
        return out
