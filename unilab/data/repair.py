"""`repair`: make a damaged store consistent again without deleting anything still readable.

The plan (`unilab.data.repair_plan`) says what is unreadable and what leaves the store.
Applying it, in this order, so that a repair killed at any point leaves the store readable
and a second repair finishes the job:

1. the readable frames of every episode that leaves the store are saved to the quarantine
   directory (`<store>.quarantine/<stamp>/`); the store is not touched yet;
2. temp files of interrupted writes are moved to the backup directory;
3. array metadata that is gone is rebuilt from the schema (a new file, nothing replaced);
4. a field whose damage reaches every episode is moved to the quarantine directory, an
   empty array of the committed length takes its place, and the root metadata records it
   (reads of its old frames then raise `MissingDataError`; every other field is intact);
5. when episodes leave from the middle (or the index is damaged), the store is rebuilt
   from the kept episodes in a sibling directory and swapped in (`dirswap.replace_dir`),
   the old store becoming the backup; otherwise only uncommitted tails are truncated, each
   file that truncation rewrites or deletes copied to the backup directory first.

Backups (`<store>.repair-backup/<stamp>/`) are kept unless `backup=False`; the quarantine
directory is always kept: it holds the only copy of what left the store.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from unilab.data.dirswap import replace_dir
from unilab.data.layout import (
    INDEX_GROUP,
    Commit,
    WriterLock,
    atomic_write_json,
    fsync_dir,
    read_root,
    write_root,
)
from unilab.data.quarantine import write_quarantine
from unilab.data.repair_plan import RepairPlan, expected_array_doc, plan_repair, quarantined_fields
from unilab.data.validate import DEEP_BLOCK_BYTES, Problem, chunk_file, open_readonly


@dataclass
class RepairReport:
    """What `repair` did (or, with `dry_run`, would do). `changed` is False when the store
    needed nothing."""

    path: str
    before: Commit
    after: Commit
    problems_before: list[Problem]
    actions: list[str] = field(default_factory=list)
    dry_run: bool = False
    removed_files: list[str] = field(default_factory=list)
    truncated: dict[str, tuple[int, int]] = field(default_factory=dict)
    restored_metadata: list[str] = field(default_factory=list)
    quarantined_fields: list[str] = field(default_factory=list)
    quarantined_episodes: list[int] = field(default_factory=list)
    """Old indices of the episodes that left the store (their frames are in quarantine)."""
    unindexed_frames: tuple[int, int] | None = None
    rebuilt: bool = False
    quarantine_dir: str | None = None
    backup_dir: str | None = None

    @property
    def dropped_episodes(self) -> int:
        return self.before.episodes - self.after.episodes

    @property
    def dropped_frames(self) -> int:
        return self.before.frames - self.after.frames

    @property
    def changed(self) -> bool:
        return bool(self.actions)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "dry_run": self.dry_run,
            "changed": self.changed,
            "actions": self.actions,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "dropped_episodes": self.dropped_episodes,
            "dropped_frames": self.dropped_frames,
            "removed_files": self.removed_files,
            "truncated": {k: list(v) for k, v in self.truncated.items()},
            "restored_metadata": self.restored_metadata,
            "quarantined_fields": self.quarantined_fields,
            "quarantined_episodes": self.quarantined_episodes,
            "unindexed_frames": list(self.unindexed_frames) if self.unindexed_frames else None,
            "rebuilt": self.rebuilt,
            "quarantine_dir": self.quarantine_dir,
            "backup_dir": self.backup_dir,
            "problems_before": [p.to_json() for p in self.problems_before],
        }


def repair(
    path: str | os.PathLike[str],
    *,
    deep: bool = False,
    dry_run: bool = False,
    backup: bool = True,
) -> RepairReport:
    """Make the store at `path` consistent, keeping every episode and field that reads.

    `deep=True` also decodes every committed chunk. `dry_run=True` only plans (see
    `RepairReport.actions`). `backup=False` deletes, instead of keeping, the files the
    repair rewrites (the quarantine directory is always kept). Idempotent. Takes the
    writer lock (fails if a writer has the store open)."""
    p = Path(path)
    read_root(p)
    lock = WriterLock(p)
    try:
        plan = plan_repair(p, deep=deep)
        report = RepairReport(
            str(p), plan.before, plan.after, plan.problems, plan.describe(), dry_run
        )
        if not dry_run and plan.changes:
            _apply(plan, report, backup)
        return report
    finally:
        lock.release()


def _apply(plan: RepairPlan, report: RepairReport, backup: bool) -> None:
    p = plan.path
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-seq{plan.before.seq}-{uuid.uuid4().hex[:4]}"
    qdir = p.parent / f"{p.name}.quarantine" / stamp
    bdir = p.parent / f"{p.name}.repair-backup" / stamp if backup else None
    root = read_root(p)

    if plan.quarantine_episodes or plan.unindexed or plan.quarantine_fields:
        write_quarantine(plan, qdir, root)
        report.quarantine_dir = str(qdir)
    report.quarantined_episodes = sorted(plan.quarantine_episodes)
    report.unindexed_frames = plan.unindexed

    for f in plan.temp_files:
        rel = f.relative_to(p)
        if bdir is not None:
            _move(f, bdir / "files" / rel)
        else:
            f.unlink(missing_ok=True)
        report.removed_files.append(str(rel))

    for name, doc in plan.restore_metadata.items():
        (p / name).mkdir(parents=True, exist_ok=True)
        atomic_write_json(p / name / "zarr.json", doc)
        report.restored_metadata.append(name)

    if plan.quarantine_fields:
        if bdir is not None:
            _copy(p / "zarr.json", bdir / "files" / "zarr.json")
        fields = quarantined_fields(root)
        for name, why in plan.quarantine_fields.items():
            if (p / name).exists():
                _move(p / name, qdir / "fields" / name)
            (p / name).mkdir(parents=True, exist_ok=True)
            atomic_write_json(
                p / name / "zarr.json", expected_array_doc(plan.schema, name, plan.before.frames)
            )
            fields[name] = {
                "frames": plan.before.frames,
                "reason": why,
                "moved_to": str(qdir / "fields" / name),
                "repaired_at": stamp,
            }
            report.quarantined_fields.append(name)
        root = {**root, "quarantine": {**root.get("quarantine", {}), "fields": fields}}
        if not plan.rebuild:
            root["commit"] = plan.after.to_json()
        write_root(p, root)

    if plan.rebuild:
        _rebuild(plan, root, bdir)
        report.rebuilt = True
    else:
        _truncate_tails(plan, report, bdir)
    if bdir is not None and bdir.exists():
        report.backup_dir = str(bdir)


def _truncate_tails(plan: RepairPlan, report: RepairReport, bdir: Path | None) -> None:
    zstore = LocalStore(plan.path)
    for name, (have, keep) in plan.truncate.items():
        arr = zarr.open_array(store=zstore, path=name, mode="r+")
        if bdir is not None:  # resize rewrites zarr.json and deletes the chunks past `keep`
            _copy(plan.path / name / "zarr.json", bdir / "files" / name / "zarr.json")
            per = arr.chunks[0]
            for c in range(-(-keep // per), -(-have // per)):
                f = chunk_file(plan.path, name, arr, c)
                if f.exists():
                    _copy(f, bdir / "files" / f.relative_to(plan.path))
        arr.resize((keep, *arr.shape[1:]))
        report.truncated[name] = (have, keep)


def _rebuild(plan: RepairPlan, root: dict[str, Any], bdir: Path | None) -> None:
    """Write the kept episodes into a sibling store and swap it in."""
    from unilab.data.store import EpisodeStore, open_array

    p = plan.path
    tmp = p.parent / f".{p.name}.rebuilding-{uuid.uuid4().hex[:8]}"
    try:
        EpisodeStore._build(tmp, plan.schema)
        kept = plan.kept
        old_starts, lengths = plan.starts[kept], plan.lengths[kept]
        new_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        total = int(lengths.sum()) if kept else 0
        runs = _runs(old_starts, lengths, new_starts)
        quarantine = quarantined_fields(root)
        dst_store = LocalStore(tmp)
        for name in plan.schema.fields:
            src = open_readonly(p, name)
            dst = open_array(dst_store, name, "a")
            dst.resize((total, *dst.shape[1:]))
            skip_below = int(quarantine[name]["frames"]) if name in quarantine else 0
            if src is not None:
                _copy_runs(src, dst, runs, skip_below)
        for key, values in (("start", new_starts), ("length", lengths)):
            arr = open_array(dst_store, f"{INDEX_GROUP}/{key}", "a")
            arr.resize((len(kept),))
            if kept:
                arr[:] = values
        meta_src = open_readonly(p, f"{INDEX_GROUP}/meta")
        meta = open_array(dst_store, f"{INDEX_GROUP}/meta", "a")
        meta.resize((len(kept),))
        if kept and meta_src is not None:
            texts = np.asarray(meta_src.get_orthogonal_selection((np.array(kept),)))
            meta[:] = texts.astype(object)
        for name, q in quarantine.items():  # old quarantined frames -> kept frames among them
            below = old_starts < int(q["frames"])
            quarantine[name] = {**q, "frames": int(lengths[below].sum())}
        new_root = {**root, "commit": plan.after.to_json()}
        if quarantine:
            new_root["quarantine"] = {**root.get("quarantine", {}), "fields": quarantine}
        _fsync_tree(tmp)
        write_root(tmp, new_root)
        replace_dir(tmp, p, backup=bdir / "store" if bdir is not None else None)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _runs(
    old_starts: np.ndarray, lengths: np.ndarray, new_starts: np.ndarray
) -> list[tuple[int, int, int]]:
    """(old start, new start, length) of maximal runs of consecutive kept frames."""
    runs: list[tuple[int, int, int]] = []
    for o, n, k in zip(old_starts.tolist(), new_starts.tolist(), lengths.tolist(), strict=True):
        if runs and runs[-1][0] + runs[-1][2] == o:
            a, b, m = runs[-1]
            runs[-1] = (a, b, m + k)
        else:
            runs.append((o, n, k))
    return runs


def _copy_runs(src: Any, dst: Any, runs: list[tuple[int, int, int]], skip_below: int) -> None:
    row_bytes = max(1, int(np.prod(src.shape[1:], dtype=np.int64)) * src.dtype.itemsize)
    block = max(int(src.chunks[0]), DEEP_BLOCK_BYTES // row_bytes)
    for old, new, length in runs:
        lo = max(old, skip_below)  # a quarantined field's old frames stay unwritten
        for a in range(lo, old + length, block):
            b = min(old + length, a + block)
            dst[new + (a - old) : new + (b - old)] = np.asarray(src[a:b])


def _fsync_tree(path: Path) -> None:
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(Path(dirpath) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def _move(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(src), str(dst))


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
