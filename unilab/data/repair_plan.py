"""What `repair` would do to a store, worked out without changing anything.

For every array (each schema field and the episode index) the plan finds which committed
rows are unreadable: chunk files that are gone, chunks that do not decode (`deep`, and
always for an array whose metadata had to be rebuilt), rows past a short array, or the
whole array when it is gone or disagrees with the schema. From that:

- an array whose `zarr.json` is gone but whose chunk files are there gets its metadata
  rebuilt from the schema (nothing is lost: the chunks read again);
- a field whose damage reaches every committed episode is *quarantined*: its files move to
  the quarantine directory, and reads of its old frames raise, while every other field
  keeps all its episodes;
- otherwise the episodes the damage touches are quarantined: their readable frames are
  saved to the quarantine directory, and the store is rebuilt from the other episodes;
- episodes the index can no longer locate are saved to quarantine as one block of frames;
- uncommitted tails and temp files (leftovers of interrupted appends) are removed.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.core.metadata import ArrayV3Metadata
from zarr.storage import LocalStore, StorePath

from unilab.data.layout import INDEX_GROUP, Commit, read_commit, read_root, temp_files
from unilab.data.schema import ENUMS, StoreSchema
from unilab.data.validate import (
    DEEP_BLOCK_BYTES,
    Problem,
    chunk_file,
    index_arrays,
    open_readonly,
    validate,
)


@dataclass
class ArrayDamage:
    """Unreadable committed rows of one array: whole chunks, by chunk index."""

    name: str
    rows: int
    chunk_rows: int
    bad_chunks: list[int] = field(default_factory=list)
    whole: bool = False
    reasons: list[str] = field(default_factory=list)

    def intervals(self) -> list[tuple[int, int]]:
        """Bad row ranges [a, b) within the committed rows."""
        if self.whole:
            return [(0, self.rows)] if self.rows else []
        per = self.chunk_rows
        return [(c * per, min((c + 1) * per, self.rows)) for c in self.bad_chunks]

    def bad_mask(self, a: int, b: int) -> np.ndarray:
        """(b - a,) bool: rows of [a, b) that cannot be read."""
        mask = np.zeros(b - a, dtype=bool)
        for lo, hi in self.intervals():
            lo, hi = max(lo, a), min(hi, b)
            if lo < hi:
                mask[lo - a : hi - a] = True
        return mask


@dataclass
class RepairPlan:
    path: Path
    before: Commit
    after: Commit
    problems: list[Problem]
    schema: StoreSchema
    temp_files: list[Path] = field(default_factory=list)
    restore_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Array -> the zarr.json document rebuilt from the schema."""
    quarantine_fields: dict[str, str] = field(default_factory=dict)
    """Field -> why its committed frames leave the store."""
    quarantine_episodes: dict[int, list[str]] = field(default_factory=dict)
    """Episode (old index) -> why it leaves the store."""
    unindexed: tuple[int, int] | None = None
    """Committed frames [a, b) that no readable index entry locates."""
    kept: list[int] = field(default_factory=list)
    """Old indices of the episodes the repaired store keeps, in order."""
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(start, length) of every located episode (old indices)."""
    damage: dict[str, ArrayDamage] = field(default_factory=dict)
    truncate: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Array -> (rows now, rows after) for uncommitted tails removed in place."""
    rebuild: bool = False
    """The store is rewritten (episodes leave from the middle, or the index is damaged)."""

    def open_array(self, name: str) -> Any | None:
        """Array `name` for reading, through its rebuilt metadata when that is planned."""
        doc = self.restore_metadata.get(name)
        return array_from_doc(self.path, name, doc) if doc else open_readonly(self.path, name)

    @property
    def changes(self) -> bool:
        return bool(
            self.temp_files
            or self.restore_metadata
            or self.quarantine_fields
            or self.quarantine_episodes
            or self.unindexed
            or self.truncate
            or self.rebuild
            or self.after != self.before
        )

    def describe(self) -> list[str]:
        """One line per action, for `--dry-run` and the report."""
        lines = []
        if self.temp_files:
            lines.append(f"remove {len(self.temp_files)} temporary file(s) of interrupted writes")
        for name in self.restore_metadata:
            lines.append(f"rebuild the missing metadata of {name!r} from the schema")
        for name, why in self.quarantine_fields.items():
            lines.append(
                f"quarantine field {name!r} ({why}); every other field keeps all "
                f"{self.before.episodes} episode(s)"
            )
        if self.quarantine_episodes:
            ids = sorted(self.quarantine_episodes)
            shown = ", ".join(str(i) for i in ids[:20]) + (" ..." if len(ids) > 20 else "")
            reasons = sorted({r for rs in self.quarantine_episodes.values() for r in rs})
            lines.append(
                f"quarantine {len(ids)} episode(s) [{shown}]: {'; '.join(reasons[:5])}"
                + (" ..." if len(reasons) > 5 else "")
            )
        if self.unindexed:
            a, b = self.unindexed
            lines.append(f"quarantine frames {a}..{b - 1}: no readable index entry locates them")
        if self.rebuild:
            lines.append(
                f"rebuild the store from the {len(self.kept)} episode(s) kept "
                f"({self.after.frames} frames)"
            )
        for name, (have, keep) in self.truncate.items():
            lines.append(f"truncate {name!r} from {have} to {keep} rows (uncommitted tail)")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "temp_files": [str(f.relative_to(self.path)) for f in self.temp_files],
            "restore_metadata": list(self.restore_metadata),
            "quarantine_fields": dict(self.quarantine_fields),
            "quarantine_episodes": {str(k): v for k, v in self.quarantine_episodes.items()},
            "unindexed_frames": list(self.unindexed) if self.unindexed else None,
            "rebuild": self.rebuild,
            "truncate": {k: list(v) for k, v in self.truncate.items()},
            "actions": self.describe(),
        }


def quarantined_fields(root: dict[str, Any]) -> dict[str, dict[str, Any]]:
    q = root.get("quarantine", {})
    return dict(q.get("fields", {})) if isinstance(q, dict) else {}


def expected_array_doc(schema: StoreSchema, name: str, rows: int) -> dict[str, Any]:
    """The zarr.json a fresh store would have for array `name`, with `rows` rows."""
    from unilab.data.store import create_field_arrays

    with tempfile.TemporaryDirectory(prefix="unilab-meta-") as tmp:
        zarr.open_group(store=LocalStore(tmp), mode="w")
        create_field_arrays(Path(tmp), schema, only=[name])
        doc: dict[str, Any] = json.loads((Path(tmp) / name / "zarr.json").read_text())
    doc["shape"] = [int(rows), *doc["shape"][1:]]
    return doc


def array_from_doc(path: Path, name: str, doc: dict[str, Any]) -> Any:
    """Open the chunks of `name` read-only through metadata that is not on disk."""
    meta = ArrayV3Metadata.from_dict(doc)
    store_path = StorePath(LocalStore(path, read_only=True), name)
    return zarr.Array(zarr.AsyncArray(metadata=meta, store_path=store_path))


def has_chunk_files(path: Path, name: str) -> bool:
    chunks = path / name / "c"
    return chunks.is_dir() and any(p.is_file() for p in chunks.rglob("*"))


def missing_chunks(path: Path, name: str, arr: Any, lo: int, hi: int) -> list[int]:
    """Chunk indices covering rows [lo, hi) that have no file."""
    per = arr.chunks[0]
    if lo >= hi:
        return []
    return [
        c for c in range(lo // per, -(-hi // per)) if not chunk_file(path, name, arr, c).exists()
    ]


def undecodable_chunks(
    arr: Any, lo: int, hi: int, enum: tuple[str, ...] | None, skip: set[int]
) -> list[tuple[int, str]]:
    """(chunk, reason) for chunks covering rows [lo, hi) that fail to decode or hold
    out-of-range enum codes; chunks in `skip` (known missing) are not read."""
    per = arr.chunks[0]
    row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
    block = max(1, DEEP_BLOCK_BYTES // row_bytes // per)  # chunks per read
    bad: list[tuple[int, str]] = []
    if lo >= hi:
        return bad
    first, last = lo // per, -(-hi // per)
    for c0 in range(first, last, block):
        todo = [c for c in range(c0, min(last, c0 + block)) if c not in skip]
        if not todo:
            continue
        try:
            data = np.asarray(arr[todo[0] * per : min(hi, (todo[-1] + 1) * per)])
            offsets = [(c, (c - todo[0]) * per) for c in todo]
            for c, off in offsets:
                if enum is not None:
                    part = data[off : off + per]
                    if part.size and int(part.max()) >= len(enum):
                        bad.append((c, f"holds enum codes outside {list(enum)}"))
        except Exception:
            for c in todo:  # narrow down to the chunks that fail
                try:
                    part = np.asarray(arr[c * per : min(hi, (c + 1) * per)])
                except Exception as exc:
                    bad.append((c, f"cannot be decoded ({type(exc).__name__})"))
                    continue
                if enum is not None and part.size and int(part.max()) >= len(enum):
                    bad.append((c, f"holds enum codes outside {list(enum)}"))
    return bad


def _array_damage(
    p: Path,
    schema: StoreSchema,
    name: str,
    rows: int,
    deep: bool,
    skip_rows: int,
    plan: RepairPlan,
) -> tuple[Any | None, ArrayDamage | None]:
    """Open array `name` (rebuilding its metadata in the plan when needed) and find its
    unreadable committed rows at or past `skip_rows`."""
    arr = open_readonly(p, name)
    restored = False
    spec = schema.fields.get(name)
    if arr is None:
        doc = expected_array_doc(schema, name, rows)
        if has_chunk_files(p, name) or rows == 0:
            plan.restore_metadata[name] = doc
            arr = array_from_doc(p, name, doc)
            restored = True
        else:
            dmg = ArrayDamage(name, rows, 1, whole=True)
            dmg.reasons.append("its array is gone (no metadata, no chunk files)")
            return None, dmg
    elif spec is not None and (
        tuple(arr.shape[1:]) != spec.shape or arr.dtype != np.dtype(spec.dtype)
    ):
        dmg = ArrayDamage(name, rows, 1, whole=True)
        dmg.reasons.append(
            f"its metadata says {tuple(arr.shape[1:])} {arr.dtype}, the schema {spec.describe()}"
        )
        return None, dmg
    per = int(arr.chunks[0])
    dmg = ArrayDamage(name, rows, per)
    have = rows if restored else min(int(arr.shape[0]), rows)
    lo = min(skip_rows, have)
    missing = missing_chunks(p, name, arr, lo, have)
    for c in missing:
        dmg.reasons.append(f"chunk {c} is gone")
    bad = set(missing)
    if (deep or restored) and name != f"{INDEX_GROUP}/meta":
        for c, why in undecodable_chunks(arr, lo, have, ENUMS.get(name), bad):
            dmg.reasons.append(f"chunk {c} {why}")
            bad.add(c)
    if have < rows:
        dmg.reasons.append(f"holds {have} of {rows} committed rows")
        bad.update(range(have // per, -(-rows // per)))
    dmg.bad_chunks = sorted(bad)
    return arr, (dmg if dmg.bad_chunks else None)


def _read_known(arr: Any, dmg: ArrayDamage | None, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, known) of an int64 index array's first `rows` rows."""
    values = np.zeros(rows, dtype=np.int64)
    known = np.zeros(rows, dtype=bool)
    if arr is None or rows == 0:
        return values, known
    bad = dmg.bad_mask(0, rows) if dmg is not None else np.zeros(rows, dtype=bool)
    per = arr.chunks[0]
    for a in range(0, rows, per):
        b = min(rows, a + per)
        if bad[a:b].any():
            continue
        values[a:b] = np.asarray(arr[a:b])
        known[a:b] = True
    return values, known


def locate_episodes(
    starts: np.ndarray, s_known: np.ndarray, lengths: np.ndarray, l_known: np.ndarray, frames: int
) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the leading episodes that chain from frame 0 to `frames`; a
    start or a length that is unreadable is recovered from its neighbours."""
    out_s: list[int] = []
    out_l: list[int] = []
    n = len(starts)
    expect = 0
    for i in range(n):
        if s_known[i] and int(starts[i]) != expect:
            break
        s = expect
        if l_known[i]:
            length = int(lengths[i])
        elif i + 1 < n and s_known[i + 1]:
            length = int(starts[i + 1]) - s
        elif i + 1 == n:
            length = frames - s
        else:
            break
        if length < 1 or s + length > frames:
            break
        out_s.append(s)
        out_l.append(length)
        expect = s + length
    return np.array(out_s, dtype=np.int64), np.array(out_l, dtype=np.int64)


def plan_repair(path: str | Path, *, deep: bool = False) -> RepairPlan:
    """Work out what `repair` would do; reads the store, changes nothing."""
    p = Path(path)
    root = read_root(p)
    schema = StoreSchema.from_json(root["schema"])
    commit = read_commit(root)
    plan = RepairPlan(p, commit, commit, validate(p, deep=deep), schema)
    plan.temp_files = temp_files(p)
    already = quarantined_fields(root)

    arrays: dict[str, Any] = {}
    for name in [*schema.fields, *index_arrays()]:
        rows = commit.episodes if name.startswith(INDEX_GROUP) else commit.frames
        skip = int(already[name]["frames"]) if name in already else 0
        arr, dmg = _array_damage(p, schema, name, rows, deep, skip, plan)
        arrays[name] = arr
        if dmg is not None:
            plan.damage[name] = dmg

    # Locate the episodes from whatever of the index reads.
    e = commit.episodes
    s_arr, l_arr = f"{INDEX_GROUP}/start", f"{INDEX_GROUP}/length"
    s_val, s_known = _read_known(arrays[s_arr], plan.damage.get(s_arr), e)
    l_val, l_known = _read_known(arrays[l_arr], plan.damage.get(l_arr), e)
    starts, lengths = locate_episodes(s_val, s_known, l_val, l_known, commit.frames)
    plan.starts, plan.lengths = starts, lengths
    located = len(starts)
    end = int(starts[-1] + lengths[-1]) if located else 0
    if end < commit.frames:
        plan.unindexed = (end, commit.frames)

    # Fields whose damage reaches every episode are quarantined as a whole.
    broken: dict[int, list[str]] = {}
    for name, dmg in plan.damage.items():
        if name.startswith(INDEX_GROUP):
            continue
        hit = _episodes_hit(dmg, starts, lengths)
        if dmg.whole or (located and len(hit) == located):
            why = "; ".join(dmg.reasons[:3]) + (" ..." if len(dmg.reasons) > 3 else "")
            plan.quarantine_fields[name] = why
            continue
        for i in hit:
            broken.setdefault(i, []).append(f"{name}: {_first_reason(dmg)}")
    meta_dmg = plan.damage.get(f"{INDEX_GROUP}/meta")
    if meta_dmg is not None:
        bad = meta_dmg.bad_mask(0, located)
        for i in np.flatnonzero(bad).tolist():
            broken.setdefault(i, []).append("episode metadata unreadable")
    plan.quarantine_episodes = broken
    plan.kept = [i for i in range(located) if i not in broken]
    kept_frames = int(lengths[plan.kept].sum()) if plan.kept else 0
    index_damaged = any(n.startswith(INDEX_GROUP) for n in plan.damage)
    plan.rebuild = bool(broken) or plan.unindexed is not None or index_damaged
    if plan.rebuild:
        plan.after = Commit(kept_frames, len(plan.kept), commit.seq + 1)
        return plan
    if plan.quarantine_fields:
        plan.after = Commit(commit.frames, commit.episodes, commit.seq + 1)
    for name, arr in arrays.items():
        rows = commit.episodes if name.startswith(INDEX_GROUP) else commit.frames
        if name in plan.restore_metadata or name in plan.quarantine_fields or arr is None:
            continue
        if arr.shape[0] > rows:
            plan.truncate[name] = (int(arr.shape[0]), rows)
    return plan


def _episodes_hit(dmg: ArrayDamage, starts: np.ndarray, lengths: np.ndarray) -> list[int]:
    """Located episodes that overlap the damaged frame rows."""
    if not len(starts):
        return []
    ends = starts + lengths
    hit: set[int] = set()
    for a, b in dmg.intervals():
        first = int(np.searchsorted(ends, a, side="right"))
        last = int(np.searchsorted(starts, b, side="left"))
        hit.update(range(first, min(last, len(starts))))
    return sorted(hit)


def _first_reason(dmg: ArrayDamage) -> str:
    return dmg.reasons[0] if dmg.reasons else "unreadable"
