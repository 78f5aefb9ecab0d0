"""`EpisodeStore`: one directory of zarr v3 arrays plus a commit marker.

Append protocol (see docs/decisions/0005-episode-store.md):
  1. check every episode against the schema (nothing is written on bad input);
  2. for every field: resize the array to committed + new frames and write the new frames;
  3. append the episode-index rows (start, length, metadata JSON);
  4. replace the root zarr.json with the new commit marker {frames, episodes, seq}.
Readers never look past the commit marker, so a writer killed anywhere before step 4 leaves
only an uncommitted tail, which the next writer overwrites and `repair` truncates.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import zarr
import zarr.codecs
from zarr.storage import LocalStore

from unilab.data.chunk_guard import GuardedLocalStore
from unilab.data.episode import EpisodeMeta, coerce_episode
from unilab.data.errors import (
    EpisodeStoreError,
    MissingDataError,
    NotAStoreError,
    ReadOnlyStoreError,
    SchemaMismatchError,
)
from unilab.data.layout import (
    FORMAT_VERSION,
    INDEX_CHUNK,
    INDEX_FIELDS,
    INDEX_GROUP,
    Commit,
    WriterLock,
    fsync_dir,
    read_commit,
    read_root,
    write_root,
)
from unilab.data.schema import DURABLE_ORIGINS, ENUMS, FieldSpec, StoreSchema, fill_value_for

if TYPE_CHECKING:
    from zarr.core.array_spec import ArrayConfigParams

Mode = Literal["r", "a", "w"]
EpisodeInput = tuple[Mapping[str, Any], EpisodeMeta | Mapping[str, Any] | None]
_ARRAY_CONFIG: ArrayConfigParams = {"write_empty_chunks": True}  # a fill-valued chunk is data


def _compressors(spec: FieldSpec) -> Any:
    if spec.is_image:
        # Camera frames: fast enough to keep up with recording, decent ratio on renders.
        return zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle")
    return zarr.codecs.ZstdCodec(level=3, checksum=True)


def open_array(zstore: LocalStore, name: str, mode: str) -> Any:
    """Array `name` with the store's write config (a fill-valued chunk is still written)."""
    arr = zarr.open_array(store=zstore, path=name, mode="r" if mode == "r" else "r+")
    return arr.with_config(_ARRAY_CONFIG)


class EpisodeStore:
    """An episode store on disk. Use `EpisodeStore.create` or `EpisodeStore.open`.

    Reads never return fill values for committed frames: a chunk file that has gone
    missing, or a field that `repair` quarantined, raises `MissingDataError` naming the
    field, the frames and the episodes.
    """

    def __init__(self, path: Path, mode: Mode, *, fsync_data: bool | None = None) -> None:
        # Callers use open()/create(); this only wires up an existing store.
        self.path = path
        self.mode: Mode = mode
        self.fsync_data = fsync_data
        self._lock: WriterLock | None = None
        read_root(path)  # a clear NotAStoreError before anything else
        self._lock = WriterLock(path) if mode != "r" else None
        try:
            self._root = read_root(path)
            self.schema = StoreSchema.from_json(self._root["schema"])
            self.commit: Commit = read_commit(self._root)
            self._zstore = LocalStore(path, read_only=(mode == "r"))
            self._read_zstore = GuardedLocalStore(path, read_only=True)
            self._arrays: dict[str, Any] = {}
            self._readers: dict[str, Any] = {}
            self._starts: np.ndarray = np.zeros(0, dtype=np.int64)
            self._lengths: np.ndarray = np.zeros(0, dtype=np.int64)
            self._check_lengths()
            if mode != "r":
                self._truncate_tail()
            self._load_index(0, self.commit.episodes)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ opening / closing
    @classmethod
    def create(
        cls, path: str | os.PathLike[str], schema: StoreSchema, *, overwrite: bool = False
    ) -> EpisodeStore:
        """Create an empty store at `path` and open it for appending.

        The store is built in a sibling temp directory and renamed into place, so `path` is
        either absent, or a complete empty store. `overwrite=True` replaces an existing
        episode store (never a directory that is not one)."""
        target = Path(path)
        if target.exists() and not (target.is_dir() and not any(target.iterdir())):
            try:
                read_root(target)
            except NotAStoreError:
                raise EpisodeStoreError(
                    f"{target} exists and is not an empty directory or an episode store; "
                    "refusing to replace it"
                ) from None
            if not overwrite:
                raise EpisodeStoreError(
                    f"{target} is already an episode store; open it with mode 'a', or pass "
                    "overwrite=True to replace it"
                )
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.creating-{uuid.uuid4().hex[:8]}")
        try:
            cls._build(tmp, schema)
            if target.exists():
                lock = WriterLock(target)  # never replace a store a writer has open
                try:
                    shutil.rmtree(target)
                finally:
                    lock.release()
            os.rename(tmp, target)
            fsync_dir(target.parent)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        return cls(target, "a")

    @staticmethod
    def _build(path: Path, schema: StoreSchema) -> None:
        zarr.open_group(store=LocalStore(path), mode="w-")
        create_field_arrays(path, schema)
        doc = {
            "format_version": FORMAT_VERSION,
            "schema": schema.to_json(),
            "enums": {k: list(v) for k, v in ENUMS.items()},
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "commit": Commit(0, 0, 0).to_json(),
        }
        write_root(path, doc)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        mode: Mode = "r",
        *,
        schema: StoreSchema | None = None,
        fsync_data: bool | None = None,
    ) -> EpisodeStore:
        """Open a store. mode 'r': read (many readers, also while a writer appends);
        'a': append (creates the store when absent and `schema` is given); 'w': create,
        replacing an existing episode store. `schema`, when given, must match the store's.
        `fsync_data=True` also flushes frame chunks before each commit (power-loss safety;
        the commit marker itself is always fsynced); `False` never does; `None` (default)
        does it for appends holding real-robot or human frames (origin `real`/`human`),
        which cannot be recorded again, and not for sim/world-model frames."""
        p = Path(path)
        if mode not in ("r", "a", "w"):
            raise ValueError(f"mode must be 'r', 'a' or 'w', got {mode!r}")
        if mode == "w" or (mode == "a" and schema is not None and not p.exists()):
            if schema is None:
                raise ValueError("mode 'w' creates a store and needs a schema")
            store = cls.create(p, schema, overwrite=(mode == "w"))
            store.fsync_data = fsync_data
            return store
        store = cls(p, mode, fsync_data=fsync_data)
        if schema is not None:
            diffs = store.schema.differences(schema)
            if diffs:
                store.close()
                raise SchemaMismatchError(
                    f"{p}: schema does not match the store: {'; '.join(diffs)}"
                )
        return store

    def close(self) -> None:
        if getattr(self, "_lock", None) is not None:
            assert self._lock is not None
            self._lock.release()
            self._lock = None
        self._arrays = {}
        self._readers = {}

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"EpisodeStore({str(self.path)!r}, mode={self.mode!r}, episodes={len(self)}, "
            f"frames={self.num_frames})"
        )

    # ------------------------------------------------------------------ arrays
    def _array(self, name: str, min_len: int = 0) -> Any:
        """The zarr array for `name`, reopened when its cached shape is shorter than
        `min_len` (a concurrent writer has grown it since we opened it)."""
        arr = self._arrays.get(name)
        if arr is None or arr.shape[0] < min_len:
            try:
                arr = open_array(self._zstore, name, self.mode)
            except FileNotFoundError:
                raise EpisodeStoreError(
                    f"{self.path}: array {name!r} is missing; run `unilab data validate`"
                ) from None
            self._arrays[name] = arr
        return arr

    def _reader(self, name: str, min_len: int) -> Any:
        """The array `name` opened through the guarded store (for reading committed rows)."""
        arr = self._readers.get(name)
        if arr is None or arr.shape[0] < min_len:
            try:
                arr = zarr.open_array(store=self._read_zstore, path=name, mode="r")
            except FileNotFoundError:
                raise MissingDataError(
                    f"{self.path}: array {name!r} is missing; run `unilab data validate`"
                ) from None
            self._readers[name] = arr
        return arr

    def _guarded(
        self, name: str, lo: int, hi: int, read: Any, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """Run `read(array)` over committed rows [lo, hi] of `name` (only `rows` of them,
        when given); raise instead of returning fill values for quarantined rows or chunk
        files that are gone."""
        quarantined = self.quarantined_fields.get(name)
        if quarantined is not None and lo < int(quarantined["frames"]):
            bad = (lo, min(hi, int(quarantined["frames"]) - 1))
            raise MissingDataError(
                f"{self.path}: field {name!r} frames {bad[0]}..{bad[1]} "
                f"({self._episodes_text(*bad)}) were quarantined by `unilab data repair` "
                f"({quarantined.get('reason', 'damaged')}); its files are in "
                f"{quarantined.get('moved_to', 'the quarantine directory')}; the other "
                "fields are intact"
            )
        arr = self._reader(name, hi + 1)
        data = np.asarray(read(arr))
        per = arr.chunks[0]
        chunks = range(lo // per, hi // per + 1) if rows is None else np.unique(rows // per)
        missing = self._read_zstore.missing_among(name, (int(c) for c in chunks))
        if missing:
            c = missing[0]
            a, b = c * per, min((c + 1) * per, self.num_frames) - 1
            raise MissingDataError(
                f"{self.path}: field {name!r} chunk {c} (frames {a}..{b}, "
                f"{self._episodes_text(a, b)}) is committed but its file is gone "
                f"({len(missing)} chunk(s) missing in this read); it would read back as fill "
                "values. Run `unilab data validate` and `unilab data repair`, which keeps "
                "every episode the damage does not touch"
            )
        return data

    def _episodes_text(self, a: int, b: int) -> str:
        """'episode 4' / 'episodes 4..6' holding frames [a, b]."""
        ends = self._starts + self._lengths
        first = int(np.searchsorted(ends, a, side="right"))
        last = int(np.searchsorted(ends, b, side="right"))
        last = min(last, len(self) - 1)
        if first >= len(self):
            return "no committed episode"
        return f"episode {first}" if first == last else f"episodes {first}..{last}"

    @property
    def quarantined_fields(self) -> dict[str, dict[str, Any]]:
        """Fields whose committed frames [0, frames) repair moved out of the store."""
        q = self._root.get("quarantine", {})
        return dict(q.get("fields", {})) if isinstance(q, dict) else {}

    def _all_array_names(self) -> list[str]:
        return [*self.schema.fields, *(f"{INDEX_GROUP}/{n}" for n in ("start", "length", "meta"))]

    def _check_lengths(self) -> None:
        for name in self._all_array_names():
            need = self.commit.episodes if name.startswith(INDEX_GROUP) else self.commit.frames
            have = self._array(name).shape[0]
            if have < need:
                raise EpisodeStoreError(
                    f"{self.path}: array {name!r} holds {have} rows but {need} are committed; "
                    "the store is damaged: run `unilab data repair`"
                )

    def _truncate_tail(self) -> None:
        """Drop rows past the commit marker (left by an interrupted append)."""
        for name in self._all_array_names():
            arr = self._array(name)
            keep = self.commit.episodes if name.startswith(INDEX_GROUP) else self.commit.frames
            if arr.shape[0] > keep:
                arr.resize((keep, *arr.shape[1:]))

    # ------------------------------------------------------------------ index
    def _load_index(self, first: int, stop: int) -> None:
        if stop <= first:
            return
        starts = np.asarray(self._array(f"{INDEX_GROUP}/start", stop)[first:stop])
        lengths = np.asarray(self._array(f"{INDEX_GROUP}/length", stop)[first:stop])
        self._starts = np.concatenate([self._starts[:first], starts])
        self._lengths = np.concatenate([self._lengths[:first], lengths])

    def refresh(self) -> bool:
        """Re-read the commit marker (readers following a live writer); True if it moved."""
        root = read_root(self.path)
        commit = read_commit(root)
        if commit == self.commit:
            return False
        old = self.commit
        self.commit = commit
        self._root = root
        self._load_index(min(old.episodes, commit.episodes), commit.episodes)
        self._starts = self._starts[: commit.episodes]
        self._lengths = self._lengths[: commit.episodes]
        return True

    def __len__(self) -> int:
        return self.commit.episodes

    @property
    def num_frames(self) -> int:
        return self.commit.frames

    @property
    def starts(self) -> np.ndarray:
        """First frame of each committed episode (read-only view)."""
        view = self._starts.view()
        view.flags.writeable = False
        return view

    @property
    def lengths(self) -> np.ndarray:
        """Frame count of each committed episode (read-only view)."""
        view = self._lengths.view()
        view.flags.writeable = False
        return view

    def episode_ids(self) -> np.ndarray:
        """(num_frames,) int64: the episode each committed frame belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self._lengths)

    def _check_episode(self, i: int) -> int:
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"episode {i} out of range: the store has {n} committed episodes")
        return j

    # ------------------------------------------------------------------ reading
    def read(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Committed frames [start, stop) of field `name`."""
        if name not in self.schema.fields:
            raise KeyError(f"unknown field {name!r}; the store's fields are {self.schema.names}")
        stop = self.num_frames if stop is None else stop
        if not 0 <= start <= stop <= self.num_frames:
            raise IndexError(
                f"frames [{start}, {stop}) are outside the committed range [0, {self.num_frames})"
            )
        if stop == start:
            spec = self.schema.fields[name]
            return np.zeros((0, *spec.shape), dtype=spec.dtype)
        return self._guarded(name, start, stop - 1, lambda arr: arr[start:stop])

    def read_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Committed frames at arbitrary indices `rows` (any shape) of field `name`; each
        stored chunk is fetched once per call."""
        if name not in self.schema.fields:
            raise KeyError(f"unknown field {name!r}; the store's fields are {self.schema.names}")
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            spec = self.schema.fields[name]
            return np.zeros((*rows.shape, *spec.shape), dtype=spec.dtype)
        lo, hi = int(rows.min()), int(rows.max())
        if lo < 0 or hi >= self.num_frames:
            raise IndexError(
                f"frames [{lo}, {hi}] are outside the committed range [0, {self.num_frames})"
            )
        unique, inverse = np.unique(rows, return_inverse=True)
        data = self._guarded(
            name, lo, hi, lambda arr: arr.get_orthogonal_selection((unique,)), unique
        )
        return data[inverse.reshape(rows.shape)]

    def episode(self, i: int, fields: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """All (or the named) fields of committed episode `i`, as arrays of its frames."""
        j = self._check_episode(i)
        a = int(self._starts[j])
        b = a + int(self._lengths[j])
        return {name: self.read(name, a, b) for name in (fields or self.schema.fields)}

    def meta(self, i: int) -> EpisodeMeta:
        j = self._check_episode(i)
        return EpisodeMeta.from_json(str(self._array(f"{INDEX_GROUP}/meta", j + 1)[j]))

    def all_meta(self) -> list[EpisodeMeta]:
        n = len(self)
        if n == 0:
            return []
        texts = self._array(f"{INDEX_GROUP}/meta", n)[:n]
        return [EpisodeMeta.from_json(str(t)) for t in texts]

    # ------------------------------------------------------------------ appending
    def append_episode(
        self, frames: Mapping[str, Any], meta: EpisodeMeta | Mapping[str, Any] | None = None
    ) -> int:
        """Append one episode atomically; returns its index."""
        return self.append_episodes([(frames, meta)])[0]

    def append_episodes(self, episodes: Sequence[EpisodeInput]) -> list[int]:
        """Append several episodes under one commit (all or none become visible)."""
        if self.mode == "r":
            raise ReadOnlyStoreError(f"{self.path} was opened with mode 'r'; open it with 'a'")
        if self._lock is None:
            raise EpisodeStoreError(f"{self.path}: the store is closed")
        if not episodes:
            return []
        metas = [EpisodeMeta.coerce(m) for _, m in episodes]
        checked = []
        for k, ((frames, _), meta) in enumerate(zip(episodes, metas, strict=True)):
            try:
                checked.append(coerce_episode(self.schema, frames, meta))
            except (SchemaMismatchError, ValueError) as exc:
                if len(episodes) == 1:
                    raise
                raise type(exc)(f"episode {k} of {len(episodes)}: {exc}") from exc
        meta_json = [m.to_json() for m in metas]
        lengths = np.array([len(c["reward"]) for c in checked], dtype=np.int64)
        f0, e0 = self.commit.frames, self.commit.episodes
        f1, e1 = f0 + int(lengths.sum()), e0 + len(checked)

        for name in self.schema.fields:
            data = (
                checked[0][name]
                if len(checked) == 1
                else np.concatenate([c[name] for c in checked])
            )
            self._write_rows(name, f0, f1, data)
        starts = f0 + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self._write_rows(f"{INDEX_GROUP}/start", e0, e1, starts)
        self._write_rows(f"{INDEX_GROUP}/length", e0, e1, lengths)
        self._write_rows(f"{INDEX_GROUP}/meta", e0, e1, np.array(meta_json, dtype=object))
        if self._durable(checked):
            self._fsync_rows(f0, f1, e0, e1)

        new = Commit(f1, e1, self.commit.seq + 1)
        root = dict(self._root)
        root["commit"] = new.to_json()
        write_root(self.path, root)  # the commit point
        self._root, self.commit = root, new
        self._starts = np.concatenate([self._starts, starts])
        self._lengths = np.concatenate([self._lengths, lengths])
        return list(range(e0, e1))

    def _durable(self, checked: list[dict[str, np.ndarray]]) -> bool:
        """fsync this append's data? `fsync_data`, or by default: it holds real/human frames."""
        if self.fsync_data is not None:
            return bool(self.fsync_data)
        codes = [ENUMS["origin"].index(o) for o in DURABLE_ORIGINS]
        return any(bool(np.isin(c["origin"], codes).any()) for c in checked)

    def _write_rows(self, name: str, a: int, b: int, data: np.ndarray) -> None:
        arr = self._array(name)
        if arr.shape[0] != b:
            arr.resize((b, *arr.shape[1:]))
        arr[a:b] = data

    def _fsync_rows(self, f0: int, f1: int, e0: int, e1: int) -> None:
        """fsync the chunk files and array metadata touched by rows [f0, f1) / [e0, e1)."""
        dirs: set[Path] = set()
        for name in self._all_array_names():
            a, b = (e0, e1) if name.startswith(INDEX_GROUP) else (f0, f1)
            arr = self._array(name)
            rows = arr.chunks[0]
            for c in range(a // rows, (b - 1) // rows + 1):
                key = arr.metadata.encode_chunk_key((c,) + (0,) * (arr.ndim - 1))
                chunk = self.path / name / key
                _fsync_file(chunk)
                dirs.update(p for p in chunk.parents if self.path in p.parents)
            _fsync_file(self.path / name / "zarr.json")
        for d in dirs:
            fsync_dir(d)


def create_field_arrays(
    path: Path, schema: StoreSchema, *, only: Sequence[str] | None = None
) -> None:
    """Create the empty (0-row) arrays of `schema` and the episode index under `path`
    (all of them, or the names in `only`, replacing whatever is there)."""
    root = zarr.open_group(store=LocalStore(path), mode="a")
    specs: dict[str, tuple[tuple[int, ...], int, str, Any, Any]] = {
        name: (
            spec.shape,
            spec.chunk_frames or 1,
            spec.dtype,
            fill_value_for(spec.dtype),
            _compressors(spec),
        )
        for name, spec in schema.fields.items()
    }
    for name, dtype in INDEX_FIELDS.items():
        fill = -1 if dtype == "int64" else ""
        specs[f"{INDEX_GROUP}/{name}"] = ((), INDEX_CHUNK, dtype, fill, "auto")
    for name, (shape, rows, dtype, fill, compressors) in specs.items():
        if only is not None and name not in only:
            continue
        root.create_array(
            name,
            shape=(0, *shape),
            chunks=(rows, *shape),
            dtype=dtype,
            fill_value=fill,
            compressors=compressors,
            config=_ARRAY_CONFIG,
            overwrite=only is not None,
        )


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
