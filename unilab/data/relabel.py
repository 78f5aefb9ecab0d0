"""Rewrite one label column of a committed store in place, atomically.

Labels computed after recording (the segmentation critic's `segment`, curation weights)
belong to frames that are already committed. `write_column` never writes into the live
array: it builds a complete copy of the column (same chunking, codecs and fill value)
in a hidden sibling folder inside the store, fsyncs it, and swaps the two folders with
one `renameat2(RENAME_EXCHANGE)` (`unilab.data.dirswap`), so at every moment the column's
path holds either the whole old column or the whole new one. No other array, the episode
index and the commit marker are touched. The writer lock is held throughout (the store
must be open with mode 'a'), so no append races the swap. A crash can leave a
`.relabel-*` folder behind, which the next `write_column` removes.

Only label columns may be rewritten: `segment`, `token` (exploration tokens) and user columns that are neither
observations, images nor the action (ground truth and what policies read stay as
recorded).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import zarr
from zarr.storage import LocalStore

from unilab.data.dirswap import exchange_dirs
from unilab.data.episode import cast_to_spec, encode_enum
from unilab.data.errors import EpisodeStoreError, ReadOnlyStoreError, SchemaMismatchError
from unilab.data.layout import fsync_dir
from unilab.data.schema import ENUMS
from unilab.data.store import EpisodeStore, open_array

RELABEL_PREFIX = ".relabel-"
LABEL_CORE = ("segment", "token")


def label_columns(store: EpisodeStore) -> list[str]:
    """The columns `write_column` may rewrite in this store."""
    user = [
        n
        for n in store.schema.user_fields
        if not n.startswith(("obs/", "images/", "depth/")) and n != "action"
    ]
    return [*LABEL_CORE, *user]


def _clean_leftovers(path: Path) -> None:
    for entry in path.iterdir():
        if entry.name.startswith(RELABEL_PREFIX) and entry.is_dir():
            shutil.rmtree(entry)


def _fsync_tree(path: Path) -> None:
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(Path(dirpath) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def write_column(store: EpisodeStore, name: str, values: np.ndarray) -> None:
    """Replace every committed frame of column `name` by `values` ((num_frames, *shape);
    `segment` also takes label names). See the module doc for the guarantees."""
    if store.mode == "r":
        raise ReadOnlyStoreError(f"{store.path} was opened with mode 'r'; open it with 'a'")
    valid = label_columns(store)
    if name not in valid:
        raise SchemaMismatchError(
            f"column {name!r} cannot be rewritten: only label columns can ({', '.join(valid)})"
        )
    if name in store.quarantined_fields:
        raise EpisodeStoreError(
            f"{store.path}: column {name!r} is quarantined; run `unilab data repair` first"
        )
    spec = store.schema.fields[name]
    n = store.num_frames
    if name in ENUMS:
        data = encode_enum(name, values, n)
    else:
        arr = np.asarray(values)
        text = f"({n}, {', '.join(map(str, spec.shape))}) {spec.dtype}".replace(", )", ")")
        data = cast_to_spec(name, arr, np.dtype(spec.dtype), text)
    if data.shape != (n, *spec.shape):
        raise SchemaMismatchError(
            f"column {name!r}: expected {n} frames of shape {spec.shape}, got {data.shape}"
        )
    root = Path(store.path)
    _clean_leftovers(root)
    old = open_array(store._zstore, name, "r")
    tmp = root / f"{RELABEL_PREFIX}{uuid.uuid4().hex[:8]}"
    try:
        new = zarr.create_array(
            store=LocalStore(tmp),
            shape=(n, *spec.shape),
            chunks=old.chunks,
            dtype=old.dtype,
            fill_value=old.fill_value,
            compressors=old.compressors,
            config={"write_empty_chunks": True},
        )
        if n:
            new[:] = np.ascontiguousarray(data)
        _fsync_tree(tmp)
        target = root / name
        if not exchange_dirs(tmp, target):
            # No atomic exchange here: old column aside, new one in, old one removed.
            aside = root / f"{RELABEL_PREFIX}old-{uuid.uuid4().hex[:8]}"
            os.rename(target, aside)
            os.rename(tmp, target)
            tmp = aside
        fsync_dir(target.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    store._arrays.pop(name, None)
    store._readers.pop(name, None)
