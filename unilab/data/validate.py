"""Integrity check and summary of an episode store, without modifying it."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from unilab.data.episode import EpisodeMeta
from unilab.data.layout import INDEX_GROUP, Commit, read_commit, read_root, temp_files
from unilab.data.schema import ENUMS, StoreSchema

TAIL_KINDS = frozenset({"uncommitted_tail", "temp_file"})
"""Problems an interrupted append leaves behind; harmless to readers, removed by repair."""

DEEP_BLOCK_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Problem:
    """One integrity problem. `kind` is one of: uncommitted_tail, temp_file (harmless
    leftovers of an interrupted append), missing_array, schema, short_array, missing_chunk,
    unreadable_chunk, index, bad_value (damage: committed data is not fully readable),
    quarantined_field (a field whose older frames `repair` moved out of the store; reads of
    them raise, the other fields are whole)."""

    kind: str
    where: str
    message: str

    @property
    def harmless(self) -> bool:
        return self.kind in TAIL_KINDS

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "harmless": self.harmless}

    def __str__(self) -> str:
        return f"[{self.kind}] {self.where}: {self.message}"


def index_arrays() -> list[str]:
    return [f"{INDEX_GROUP}/{n}" for n in ("start", "length", "meta")]


def open_readonly(path: Path, name: str) -> Any | None:
    try:
        return zarr.open_array(store=LocalStore(path, read_only=True), path=name, mode="r")
    except (FileNotFoundError, ValueError, KeyError):
        return None
    except Exception as exc:  # zarr raises its own NodeNotFound errors
        if type(exc).__name__.endswith(("NotFoundError", "NodeTypeValidationError")):
            return None
        raise


def chunk_file(path: Path, name: str, arr: Any, chunk: int) -> Path:
    key = arr.metadata.encode_chunk_key((chunk,) + (0,) * (arr.ndim - 1))
    return path / name / key


def first_missing_chunk(path: Path, name: str, arr: Any, rows: int, start: int = 0) -> int | None:
    """Index of the first chunk within rows [start, rows) that has no file, else None."""
    per = arr.chunks[0]
    if start >= rows:
        return None
    for c in range(start // per, -(-rows // per)):
        if not chunk_file(path, name, arr, c).exists():
            return c
    return None


def first_unreadable_row(
    arr: Any, rows: int, enum: tuple[str, ...] | None, start: int = 0
) -> tuple[int, str, str] | None:
    """Decode rows [start, rows) block by block: (first bad row, problem kind, reason) for
    the first chunk that fails to decode or (enum columns) holds an out-of-range code."""
    per = arr.chunks[0]
    row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
    block = max(per, (DEEP_BLOCK_BYTES // row_bytes) // per * per)
    for a in range(start // per * per if start < rows else rows, rows, block):
        b = min(rows, a + block)
        try:
            data = np.asarray(arr[a:b])
        except Exception as exc:
            # Narrow down to the chunk that fails.
            for c in range(a // per, -(-b // per)):
                try:
                    arr[c * per : min(b, (c + 1) * per)]
                except Exception:
                    reason = f"chunk {c} cannot be decoded ({type(exc).__name__}: {exc})"
                    return c * per, "unreadable_chunk", reason
            return a, "unreadable_chunk", f"rows [{a}, {b}) cannot be decoded ({exc})"
        if enum is not None:
            bad = np.flatnonzero(data >= len(enum))
            if bad.size:
                row = a + int(bad[0])
                reason = f"code {int(data[bad[0]])} at frame {row} is not in {list(enum)}"
                return row, "bad_value", reason
    return None


def check_index(starts: np.ndarray, lengths: np.ndarray) -> int:
    """The number of leading episodes whose (start, length) entries chain correctly."""
    expect = 0
    for i, (s, n) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
        if s != expect or n < 1:
            return i
        expect = s + n
    return len(starts)


def validate(path: str | os.PathLike[str], *, deep: bool = False) -> list[Problem]:
    """Integrity problems of the store at `path` (empty list: clean). `deep=True` also
    decodes every committed chunk and checks enum codes and metadata JSON.
    Raises NotAStoreError when `path` is not an episode store at all."""
    p = Path(path)
    root = read_root(p)
    schema = StoreSchema.from_json(root["schema"])
    commit = read_commit(root)
    problems = [
        Problem(
            "temp_file", str(f.relative_to(p)), "leftover temporary file of an interrupted write"
        )
        for f in temp_files(p)
    ]
    quarantine = root.get("quarantine", {}).get("fields", {})
    for name, q in quarantine.items():
        problems.append(
            Problem(
                "quarantined_field",
                name,
                f"frames 0..{int(q['frames']) - 1} were moved out by repair ({q.get('reason')}) "
                f"to {q.get('moved_to')}; reading them raises",
            )
        )
    arrays: dict[str, Any] = {}
    for name in [*schema.fields, *index_arrays()]:
        rows = commit.episodes if name.startswith(INDEX_GROUP) else commit.frames
        arr = open_readonly(p, name)
        if arr is None:
            problems.append(Problem("missing_array", name, "array metadata is missing"))
            continue
        arrays[name] = arr
        spec = schema.fields.get(name)
        if spec is not None and (
            tuple(arr.shape[1:]) != spec.shape or arr.dtype != np.dtype(spec.dtype)
        ):
            problems.append(
                Problem(
                    "schema",
                    name,
                    f"array has per-frame shape {tuple(arr.shape[1:])} dtype {arr.dtype}; "
                    f"schema says {spec.describe()}",
                )
            )
            continue
        have = arr.shape[0]
        if have > rows:
            problems.append(
                Problem("uncommitted_tail", name, f"{have - rows} rows past the {rows} committed")
            )
        elif have < rows:
            problems.append(Problem("short_array", name, f"holds {have} rows; {rows} committed"))
        checked = min(have, rows)
        skip = int(quarantine[name]["frames"]) if name in quarantine else 0
        miss = first_missing_chunk(p, name, arr, checked, skip)
        if miss is not None:
            problems.append(
                Problem(
                    "missing_chunk",
                    name,
                    f"chunk {miss} (rows from {miss * arr.chunks[0]}) of the committed range is "
                    "missing and would read as fill values",
                )
            )
        elif deep and name != f"{INDEX_GROUP}/meta":
            bad = first_unreadable_row(arr, checked, ENUMS.get(name), skip)
            if bad is not None:
                problems.append(Problem(bad[1], name, bad[2]))
    problems += _index_problems(p, arrays, commit, deep)
    return problems


def _index_problems(p: Path, arrays: dict[str, Any], commit: Commit, deep: bool) -> list[Problem]:
    start, length = arrays.get(f"{INDEX_GROUP}/start"), arrays.get(f"{INDEX_GROUP}/length")
    if start is None or length is None:
        return []
    e = commit.episodes
    if start.shape[0] < e or length.shape[0] < e:
        return []  # reported as short_array already
    try:
        starts, lengths = np.asarray(start[:e]), np.asarray(length[:e])
    except Exception as exc:
        return [Problem("index", INDEX_GROUP, f"episode index cannot be read ({exc})")]
    out = []
    good = check_index(starts, lengths)
    if good < e:
        out.append(
            Problem(
                "index",
                INDEX_GROUP,
                f"episode {good} has start {starts[good]} length {lengths[good]}, which does "
                "not follow the previous episode",
            )
        )
    elif e and int(starts[-1] + lengths[-1]) != commit.frames:
        out.append(
            Problem(
                "index",
                INDEX_GROUP,
                f"episodes cover {int(starts[-1] + lengths[-1])} frames; {commit.frames} committed",
            )
        )
    meta = arrays.get(f"{INDEX_GROUP}/meta")
    if deep and meta is not None and meta.shape[0] >= e:
        for i, text in enumerate(np.asarray(meta[:e]).tolist()):
            try:
                EpisodeMeta.from_json(str(text))
            except (ValueError, TypeError) as exc:
                out.append(Problem("index", f"{INDEX_GROUP}/meta", f"episode {i}: {exc}"))
                break
    return out


def disk_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            total += (Path(dirpath) / name).stat().st_size
    return total


def info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A summary of the store: counts, schema, origins, success, tasks, size on disk."""
    from unilab.data.errors import MissingDataError
    from unilab.data.store import EpisodeStore

    p = Path(path)
    with EpisodeStore.open(p, "r") as store:
        try:
            origin = store.read("origin") if store.num_frames else np.zeros(0, np.uint8)
        except MissingDataError:  # a damaged or quarantined column: summarise the rest
            origin = np.zeros(0, np.uint8)
        try:
            interventions = int(store.read("is_intervention").sum()) if store.num_frames else 0
        except MissingDataError:
            interventions = -1
        metas = store.all_meta()
        lengths = store.lengths
        origins = Counter(ENUMS["origin"][int(c)] for c in np.unique(origin))
        counts = np.bincount(origin, minlength=len(ENUMS["origin"]))
        success = Counter(
            "unknown" if m.success is None else ("true" if m.success else "false") for m in metas
        )
        root = read_root(p)
        return {
            "path": str(p),
            "format_version": root["format_version"],
            "created_at": root.get("created_at"),
            "episodes": len(store),
            "frames": store.num_frames,
            "commit_seq": store.commit.seq,
            "episode_length": {
                "min": int(lengths.min()) if len(lengths) else 0,
                "mean": float(lengths.mean()) if len(lengths) else 0.0,
                "max": int(lengths.max()) if len(lengths) else 0,
            },
            "frames_by_origin": {
                name: int(counts[i]) for i, name in enumerate(ENUMS["origin"]) if name in origins
            },
            "intervention_frames": interventions,
            "success": dict(success),
            "tasks": dict(Counter(m.task for m in metas)),
            "fields": {
                n: {"shape": list(s.shape), "dtype": s.dtype, "chunk_frames": s.chunk_frames}
                for n, s in store.schema.fields.items()
            },
            "disk_bytes": disk_bytes(p),
        }
