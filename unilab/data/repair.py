"""`repair`: bring a store back to the longest readable committed prefix.

Order matters for crash safety: temp files go first, then the commit marker is lowered (if
damage forces dropping episodes), and only then are arrays truncated, so a repair that is
itself killed leaves a store that is still consistent and that a second repair finishes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from unilab.data.layout import (
    INDEX_GROUP,
    Commit,
    WriterLock,
    read_commit,
    read_root,
    temp_files,
    write_root,
)
from unilab.data.schema import ENUMS, StoreSchema
from unilab.data.store import create_field_arrays
from unilab.data.validate import (
    Problem,
    check_index,
    first_missing_chunk,
    first_unreadable_row,
    index_arrays,
    open_readonly,
    validate,
)


@dataclass
class RepairReport:
    """What `repair` did. `changed` is False when the store needed nothing."""

    path: str
    before: Commit
    after: Commit
    problems_before: list[Problem]
    removed_files: list[str] = field(default_factory=list)
    truncated: dict[str, tuple[int, int]] = field(default_factory=dict)
    recreated: list[str] = field(default_factory=list)

    @property
    def dropped_episodes(self) -> int:
        return self.before.episodes - self.after.episodes

    @property
    def dropped_frames(self) -> int:
        return self.before.frames - self.after.frames

    @property
    def changed(self) -> bool:
        return bool(
            self.removed_files or self.truncated or self.recreated or self.after != self.before
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "changed": self.changed,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "dropped_episodes": self.dropped_episodes,
            "dropped_frames": self.dropped_frames,
            "removed_files": self.removed_files,
            "truncated": {k: list(v) for k, v in self.truncated.items()},
            "recreated": self.recreated,
            "problems_before": [p.to_json() for p in self.problems_before],
        }


def _readable_rows(p: Path, name: str, arr: Any, rows: int, deep: bool) -> int:
    """How many leading rows of `arr` (up to `rows`) read back as written data."""
    have = min(arr.shape[0], rows)
    miss = first_missing_chunk(p, name, arr, have)
    if miss is not None:
        have = miss * arr.chunks[0]
    if deep and name != f"{INDEX_GROUP}/meta":
        bad = first_unreadable_row(arr, have, ENUMS.get(name))
        if bad is not None:
            have = bad[0]
    return have


def repair(path: str | os.PathLike[str], *, deep: bool = False) -> RepairReport:
    """Restore the longest readable committed prefix of the store at `path`; idempotent.
    Takes the writer lock (fails if a writer has the store open). `deep=True` also decodes
    committed chunks and drops episodes from the first undecodable one."""
    p = Path(path)
    read_root(p)
    lock = WriterLock(p)
    try:
        return _repair_locked(p, deep)
    finally:
        lock.release()


def _repair_locked(p: Path, deep: bool) -> RepairReport:
    root = read_root(p)
    schema = StoreSchema.from_json(root["schema"])
    commit = read_commit(root)
    report = RepairReport(str(p), commit, commit, validate(p, deep=deep))
    for f in temp_files(p):
        f.unlink(missing_ok=True)
        report.removed_files.append(str(f.relative_to(p)))

    missing = [n for n in [*schema.fields, *index_arrays()] if open_readonly(p, n) is None]
    if missing:
        # Without an array no episode is whole: keep the others' files, restart empty.
        create_field_arrays(p, schema, only=missing)
        report.recreated = missing
    arrays: dict[str, Any] = {n: open_readonly(p, n) for n in [*schema.fields, *index_arrays()]}

    frames_ok = min(
        (_readable_rows(p, n, arrays[n], commit.frames, deep) for n in schema.fields),
        default=commit.frames,
    )
    episodes_ok = min(
        _readable_rows(p, n, arrays[n], commit.episodes, deep) for n in index_arrays()
    )
    if missing:
        frames_ok = episodes_ok = 0
    starts = np.asarray(arrays[f"{INDEX_GROUP}/start"][:episodes_ok])
    lengths = np.asarray(arrays[f"{INDEX_GROUP}/length"][:episodes_ok])
    keep = check_index(starts, lengths)
    ends = starts[:keep] + lengths[:keep]
    keep = int(np.searchsorted(ends, min(frames_ok, commit.frames), side="right"))
    new_frames = int(ends[keep - 1]) if keep else 0
    if (new_frames, keep) != (commit.frames, commit.episodes):
        after = Commit(new_frames, keep, commit.seq + 1)
        write_root(p, {**root, "commit": after.to_json()})
        report.after = after

    zstore = LocalStore(p)
    for name in [*schema.fields, *index_arrays()]:
        rows = report.after.episodes if name.startswith(INDEX_GROUP) else report.after.frames
        arr = zarr.open_array(store=zstore, path=name, mode="r+")
        if arr.shape[0] > rows:
            report.truncated[name] = (arr.shape[0], rows)
            arr.resize((rows, *arr.shape[1:]))
    return report
