"""`EpisodeWriter`: record a batched task's steps into an episode store.

Each `add_step` copies one row per field for all envs into a ring buffer shaped
(capacity, n_envs, *shape) — a handful of vectorized copies per step, no per-env Python
work. When envs finish (terminated or truncated), their frames are gathered out of the ring
and appended together under one commit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from unilab.data.episode import CORE_DEFAULTS, EpisodeMeta, cast_to_spec, encode_enum
from unilab.data.errors import SchemaMismatchError
from unilab.data.schema import ENUMS
from unilab.data.store import EpisodeInput, EpisodeStore

ENV_LEVEL = ("origin", "segment")


class EpisodeWriter:
    """Buffers per-env frames from batched steps and appends each env's episode when it ends.

    `add_step(frames)` takes one array per schema field with leading dim `n_envs`
    (`origin`/`segment` may also be a single name; optional core columns may be left out).
    An env's episode ends at a step where its `terminated` or `truncated` is True; the frame
    of that step is the episode's last. Call `set_meta(env, ...)` any time during an episode
    to attach metadata (seed, task, success, ...); `default_meta` applies otherwise.

    Finished episodes are committed together: at every step where one ends when
    `commit_frames` is 0 (the default: nothing finished waits in memory), else once at least
    `commit_frames` finished frames are waiting. Each commit has a fixed cost of a few tens
    of ms (one resize + write per array), so batched sim recording should pass e.g.
    `commit_frames=16384`; `flush()` and `close()` commit whatever is waiting.
    """

    def __init__(
        self,
        store: EpisodeStore,
        n_envs: int,
        *,
        origin: str = "sim",
        default_meta: EpisodeMeta | Mapping[str, Any] | None = None,
        initial_capacity: int = 64,
        commit_frames: int = 0,
    ) -> None:
        if n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {n_envs}")
        if commit_frames < 0:
            raise ValueError(f"commit_frames must be >= 0, got {commit_frames}")
        if origin not in ENUMS["origin"]:
            raise SchemaMismatchError(f"origin {origin!r} is not one of {list(ENUMS['origin'])}")
        self.store = store
        self.n_envs = n_envs
        self.origin = origin
        self.default_meta = EpisodeMeta.coerce(default_meta)
        self._capacity = max(2, initial_capacity)
        self._buf: dict[str, np.ndarray] = {}
        self._given: set[str] = set()
        self._step = 0  # global step counter; row of step s is s % capacity
        self._start = np.zeros(n_envs, dtype=np.int64)  # first step of each env's episode
        self._meta: list[EpisodeMeta | None] = [None] * n_envs
        self.commit_frames = commit_frames
        self._ready: list[EpisodeInput] = []  # finished, not yet committed
        self._ready_frames = 0
        self.episodes_written = 0
        self.frames_written = 0

    # ------------------------------------------------------------------ buffering
    def _alloc(self, capacity: int) -> dict[str, np.ndarray]:
        return {
            name: np.empty((capacity, self.n_envs, *spec.shape), dtype=spec.dtype)
            for name, spec in self.store.schema.fields.items()
            if name != "timestamp" or "timestamp" in self._given
        }

    def _grow(self, needed: int) -> None:
        capacity = self._capacity
        while capacity < needed:
            capacity *= 2
        old, old_cap = self._buf, self._capacity
        first = int(self._start.min())
        steps = np.arange(first, self._step)
        self._buf, self._capacity = self._alloc(capacity), capacity
        for name, arr in old.items():
            self._buf[name][steps % capacity] = arr[steps % old_cap]

    def _column(self, name: str, value: Any) -> np.ndarray:
        n = self.n_envs
        if name in ENV_LEVEL:
            return encode_enum(name, value, n)
        arr = np.asarray(value)
        spec = self.store.schema.fields[name]
        if arr.ndim == 0 and spec.shape == ():
            arr = np.full(n, arr)
        want = f"({n}, {', '.join(map(str, spec.shape))}) {spec.dtype}".replace(", )", ")")
        if arr.shape != (n, *spec.shape):
            raise SchemaMismatchError(
                f"field {name!r}: expected {want} (n_envs first), got shape {arr.shape}"
            )
        return cast_to_spec(name, arr, np.dtype(spec.dtype), want)

    def set_meta(self, env: int, meta: EpisodeMeta | Mapping[str, Any]) -> None:
        """Metadata for env `env`'s current episode (replaces earlier calls)."""
        self._meta[env] = EpisodeMeta.coerce(meta)

    def add_step(self, frames: Mapping[str, Any], keep: np.ndarray | None = None) -> list[int]:
        """Buffer one batched step. Returns the store indices of the episodes committed by
        this call (see `commit_frames`). `keep`: (n_envs,) bool; an episode that ends at
        this step where it is False is dropped instead of stored (e.g. a failed demo)."""
        unknown = [k for k in frames if k not in self.store.schema.fields]
        if unknown:
            raise SchemaMismatchError(
                f"unknown field(s) {unknown}; the store's fields are {self.store.schema.names}"
            )
        if not self._buf:
            if "timestamp" not in frames and self.default_meta.fps is None:
                raise SchemaMismatchError(
                    "step has no 'timestamp': pass it every step, or give default_meta an fps"
                )
            self._given = set(frames)
            self._buf = self._alloc(self._capacity)
        if ("timestamp" in frames) != ("timestamp" in self._buf):
            raise SchemaMismatchError(
                "'timestamp' must be given at every step or at none (then metadata fps is used)"
            )
        values = dict(frames)
        values.setdefault("origin", self.origin)
        missing = [k for k in self._buf if k not in values and k not in CORE_DEFAULTS]
        if missing:
            raise SchemaMismatchError(f"step is missing field(s) {missing}")
        columns = {k: self._column(k, values.get(k, CORE_DEFAULTS.get(k))) for k in self._buf}
        live = self._step - int(self._start.min()) + 1
        if live > self._capacity:
            self._grow(live)
        row = self._step % self._capacity
        for name, col in columns.items():
            self._buf[name][row] = col  # numpy casts within the kind, as append does
        done = np.flatnonzero(np.asarray(columns["terminated"]) | np.asarray(columns["truncated"]))
        self._step += 1
        if done.size == 0:
            return []
        if keep is not None:
            kept = np.asarray(keep, dtype=bool).reshape(self.n_envs)[done]
            self.discard(done[~kept])
            done = done[kept]
        self._finish(done)
        return self.flush() if self._ready_frames >= self.commit_frames else []

    def _episode(self, env: int) -> EpisodeInput:
        steps = np.arange(self._start[env], self._step) % self._capacity
        frames = {name: buf[steps, env] for name, buf in self._buf.items()}
        meta = self._meta[env] or self.default_meta
        if "timestamp" not in self._buf and meta.fps is None:
            meta = replace(meta, fps=self.default_meta.fps)
        return frames, meta

    def _finish(self, envs: Sequence[int] | np.ndarray) -> None:
        """Move these envs' episodes (ending at the last step) out of the ring."""
        for e in envs:
            episode = self._episode(int(e))
            self._ready.append(episode)
            self._ready_frames += len(episode[0]["reward"])
            self._start[int(e)] = self._step
            self._meta[int(e)] = None

    def flush(self) -> list[int]:
        """Commit all finished episodes now; returns their store indices."""
        if not self._ready:
            return []
        ids = self.store.append_episodes(self._ready)  # on error they stay ready for a retry
        self.episodes_written += len(ids)
        self.frames_written += self._ready_frames
        self._ready, self._ready_frames = [], 0
        return ids

    def discard(self, envs: Sequence[int] | np.ndarray) -> None:
        """Drop the buffered frames of these envs' current episodes (e.g. after a reset
        that was not an episode end)."""
        for e in envs:
            self._start[int(e)] = self._step
            self._meta[int(e)] = None

    def pending_frames(self) -> np.ndarray:
        """(n_envs,) frames buffered for each env's unfinished episode."""
        return self._step - self._start

    def close(self, *, keep_partial: bool = False) -> list[int]:
        """Finish recording: commit finished episodes; unfinished ones are dropped, or with
        `keep_partial=True` committed as truncated at their last buffered frame. Returns
        the store indices committed by this call."""
        if keep_partial and self._buf:
            envs = np.flatnonzero(self.pending_frames() > 0)
            if envs.size:
                last = (self._step - 1) % self._capacity
                self._buf["truncated"][last, envs] = True
                self._finish(envs)
        ids = self.flush()
        self.discard(range(self.n_envs))
        return ids

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
