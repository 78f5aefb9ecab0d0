"""A zarr LocalStore for reading committed data that notices chunk files that are gone.

zarr treats a missing chunk file as "never written" and returns the fill value, so a chunk
deleted from disk would read back as NaN or sentinel values. `GuardedLocalStore` returns
the same `None` to zarr (raising inside zarr's asyncio gather leaves pending tasks behind)
but records the key; `EpisodeStore` checks the record after each read and raises
`MissingDataError` naming the field and the episodes.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from zarr.storage import LocalStore

_CHUNK_KEY = re.compile(r"^(?P<array>.+)/c/(?P<first>\d+)(/\d+)*$")


class GuardedLocalStore(LocalStore):
    """LocalStore that remembers every chunk key it was asked for and did not find."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._missing: set[str] = set()
        self._missing_lock = threading.Lock()

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        buf = await super().get(key, prototype, byte_range)
        if buf is None and _CHUNK_KEY.match(key):
            with self._missing_lock:
                self._missing.add(key)
        return buf

    def take_missing(self, array: str) -> list[int]:
        """Chunk indices (along frames) of `array` found missing since the last call."""
        prefix = array + "/c/"
        with self._missing_lock:
            keys = [k for k in self._missing if k.startswith(prefix)]
            self._missing.difference_update(keys)
        out = []
        for key in keys:
            match = _CHUNK_KEY.match(key)
            if match is not None and match.group("array") == array:
                out.append(int(match.group("first")))
        return sorted(set(out))
