"""`ChunkRecorder`: record whole episodes out of the training loop's batches.

The learner receives each batch as (T, N, ...) transition arrays (`unilab.runtime.rollout`
documents the fields). Column j of batch k and column j of batch k+1 are the same env as
long as the stream is *continuous*: sync mode keeps each worker's block at a fixed column
offset; a worker restart, a dropped stale chunk, or async batches from several workers
(whose blocks arrive in any order) break that, and the caller says so with
`continuous=False`.

Only whole episodes reach the store. A tracked env's frames are kept from the first step
after one of its episode ends; frames of an episode that was already running when recording
started (or resumed after a break) are dropped at that episode's end, and so is whatever is
still running when the recorder closes. `every_n_batches` > 1 thins the recording: every
n-th batch arms each tracked env that is not recording for its next whole episode (the one
that starts after its next episode end), and batches in which no env is armed or recording
cost nothing. `max_share` (default 5 %) bounds the share of the loop's wall time spent in
`record`: while over it, no env is armed, so recording thins itself out where it would
slow training. Commits run on a background thread by default.

Frame t of an episode is (obs_t, action_t, reward_t, terminated_t, truncated_t); the last
frame's flags end the episode, as in the rest of the store. `policy_version` is the version
that produced the frame's chunk.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from unilab.data.background_append import BackgroundAppender
from unilab.data.episode import EpisodeMeta
from unilab.data.schema import FieldSpec, StoreSchema
from unilab.data.store import EpisodeStore
from unilab.data.writer import EpisodeWriter

ChunkFields = Mapping[str, tuple[tuple[int, ...], str]]
"""Transition field name -> (shape per step per env, numpy dtype name), as the algorithms'
`chunk_fields` give them."""

_FLAGS = ("terminated", "truncated")


def schema_from_fields(fields: ChunkFields) -> tuple[StoreSchema, dict[str, str]]:
    """The store schema for a training run's transition fields, and store field -> chunk field.

    `obs_<group>` becomes `obs/<group>`, `images_<camera>` (uint8 H×W×C) becomes
    `images/<camera>`, `action` stays; `reward`, `terminated`, `truncated` fill the core
    columns. Everything else (`next_obs_*`, `logprob`, returns, logging terms) is left out:
    the store keeps frames, not learner bookkeeping.
    """
    missing = [k for k in ("action", "reward", *_FLAGS) if k not in fields]
    if missing:
        raise ValueError(f"transition fields lack {missing}; got {sorted(fields)}")
    user: dict[str, FieldSpec] = {}
    source: dict[str, str] = {}
    for name, (shape, dtype) in fields.items():
        if name.startswith("obs_"):
            store_name = f"obs/{name.removeprefix('obs_')}"
        elif name.startswith("images_"):
            store_name = f"images/{name.removeprefix('images_')}"
        elif name == "action":
            store_name = "action"
        else:
            continue
        user[store_name] = FieldSpec(tuple(shape), dtype)
        source[store_name] = name
    if not any(n.startswith(("obs/", "images/")) for n in user):
        raise ValueError(
            f"transition fields have no `obs_<group>` or `images_<camera>` field; got {sorted(fields)}"
        )
    for core in ("reward", *_FLAGS):
        source[core] = core
    return StoreSchema(user), source


class ChunkRecorder:
    """Turns the training loop's (T, N) batches into whole episodes in an episode store.

    `num_envs`: columns of a batch (N); `envs_per_block`: columns per worker chunk (the
    block that one `policy_version` entry describes; default N). `max_envs`: how many
    columns to track, taken evenly from every block. `fps`: control rate, stored in each
    episode's metadata (timestamps follow from it). `meta`: the rest of the episode metadata
    (task, robot, seed, ...). `commit_frames`: finished frames gathered before one commit.
    `background`: commit on a background thread, so the loop never waits for the disk
    (the default). `max_share`: the most of the loop's wall time that `record` may take;
    while it has taken more (since its first call), no env is armed for a new episode, so
    the recording thins itself out on a machine where it would slow training (None: no
    limit). The store is created when absent, else appended to (its schema must
    match).
    """

    def __init__(
        self,
        store_path: str | os.PathLike[str],
        fields: ChunkFields,
        *,
        num_envs: int,
        fps: float,
        envs_per_block: int | None = None,
        every_n_batches: int = 1,
        max_envs: int = 64,
        meta: EpisodeMeta | Mapping[str, Any] | None = None,
        commit_frames: int = 16384,
        background: bool = True,
        max_share: float | None = 0.05,
    ) -> None:
        block = num_envs if envs_per_block is None else envs_per_block
        if num_envs < 1 or block < 1 or num_envs % block:
            raise ValueError(
                f"num_envs ({num_envs}) must be a positive multiple of envs_per_block ({block})"
            )
        if every_n_batches < 1:
            raise ValueError(f"every_n_batches must be >= 1, got {every_n_batches}")
        if max_share is not None and not 0 < max_share <= 1:
            raise ValueError(f"max_share must be in (0, 1] or None, got {max_share}")
        if max_envs < 1:
            raise ValueError(f"max_envs must be >= 1, got {max_envs}")
        if not fps > 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.schema, self._source = schema_from_fields(fields)
        self.num_envs = num_envs
        self.envs_per_block = block
        self.every_n_batches = every_n_batches
        blocks = num_envs // block
        per_block = max(1, min(block, max_envs // blocks))
        self.columns = (np.arange(blocks)[:, None] * block + np.arange(per_block)[None, :]).reshape(
            -1
        )[:max_envs]
        self._block_of_column = self.columns // block
        self._contiguous = bool(np.all(np.diff(self.columns) == 1))
        base = EpisodeMeta.coerce(meta)
        self.meta = EpisodeMeta(**{**base.__dict__, "fps": float(fps)})
        self.store = EpisodeStore.open(store_path, "a", schema=self.schema)
        self._appender = BackgroundAppender(self.store) if background else None
        n = len(self.columns)
        # The writer only uses `schema` and `append_episodes`, which the appender provides.
        target = cast(EpisodeStore, self._appender) if self._appender else self.store
        self.writer = EpisodeWriter(
            target,
            n,
            origin="sim",
            default_meta=self.meta,
            initial_capacity=256,
            commit_frames=commit_frames,
        )
        self._recording = np.zeros(n, dtype=bool)  # inside a whole episode that will be kept
        self._armed = np.zeros(n, dtype=bool)  # keep the episode that starts next
        self._fed = False  # the writer saw the previous batch (its buffers are continuous)
        self.max_share = max_share
        self._first_call: float | None = None
        self.seconds_spent = 0.0  # inside record() (the loop waited this long)
        self.batches_seen = 0
        self.batches_recorded = 0
        self.batches_over_budget = 0

    # ------------------------------------------------------------------ stats
    @property
    def episodes_written(self) -> int:
        return self.writer.episodes_written

    @property
    def frames_written(self) -> int:
        return self.writer.frames_written

    # ------------------------------------------------------------------ recording
    def _take(self, array: np.ndarray) -> np.ndarray:
        cols = self.columns
        if self._contiguous:
            return array[:, cols[0] : cols[-1] + 1]
        return array[:, cols]

    def _versions(self, policy_version: int | Sequence[int] | np.ndarray) -> np.ndarray:
        versions = np.asarray(policy_version, dtype=np.int64).reshape(-1)
        blocks = self.num_envs // self.envs_per_block
        if versions.size == 1:
            return np.full(len(self.columns), versions[0], dtype=np.int64)
        if versions.size != blocks:
            raise ValueError(
                f"policy_version: expected one int or one per block ({blocks}), got {versions.size}"
            )
        return versions[self._block_of_column]

    def record(
        self,
        staging: Mapping[str, np.ndarray],
        policy_version: int | Sequence[int] | np.ndarray,
        *,
        continuous: bool = True,
    ) -> None:
        """Take one batch: `staging` holds (T, N, ...) arrays of the transition fields;
        `policy_version` is one int or one per block. `continuous=False` says this batch's
        columns do not continue the previous batch's (restart, dropped chunk): episodes in
        progress are dropped, and envs start over at their next episode start."""
        t0 = time.perf_counter()
        if self._first_call is None:
            self._first_call = t0
        self.batches_seen += 1
        if not continuous or not self._fed:
            self.writer.discard(range(len(self.columns)))
            self._recording[:] = False
        within_budget = self.max_share is None or (
            self.seconds_spent <= self.max_share * (t0 - self._first_call)
        )
        if not within_budget:
            self.batches_over_budget += 1
        if within_budget and (self.batches_seen - 1) % self.every_n_batches == 0:
            self._armed |= ~self._recording  # one arming, at most one episode per env
        if not (self._recording.any() or self._armed.any()):
            self._fed = False  # skipped: the next fed batch starts from scratch
            return
        for name in self._source.values():
            array = staging.get(name)
            if array is None or array.shape[1] != self.num_envs:
                got = "missing" if array is None else f"shape {array.shape}"
                raise ValueError(f"staging[{name!r}]: expected (T, {self.num_envs}, ...), {got}")
        self._feed(staging, self._versions(policy_version), within_budget)
        self._fed = True
        self.batches_recorded += 1
        self.seconds_spent += time.perf_counter() - t0

    def _feed(
        self, staging: Mapping[str, np.ndarray], versions: np.ndarray, within_budget: bool
    ) -> None:
        taken = {
            store: self._take(staging[src])
            for store, src in self._source.items()
            if store not in _FLAGS
        }
        flags = {flag: np.greater(self._take(staging[flag]), 0.5) for flag in _FLAGS}
        done = flags["terminated"] | flags["truncated"]
        any_done: np.ndarray = done.any(axis=1)
        # Recording every batch: an env whose episode ends stays armed for the next one.
        continuous_arm = self.every_n_batches == 1 and within_budget
        for t in range(done.shape[0]):
            frames: dict[str, Any] = {name: arr[t] for name, arr in taken.items()}
            frames["policy_version"] = versions
            if not any_done[t]:
                frames["terminated"] = flags["terminated"][t]
                frames["truncated"] = flags["truncated"][t]
                self.writer.add_step(frames)
                continue
            ends = done[t]
            drop = ends & ~self._recording  # an episode we did not see start
            frames["terminated"] = flags["terminated"][t] & ~drop
            frames["truncated"] = flags["truncated"][t] & ~drop
            self.writer.add_step(frames)  # finishes (and may commit) the recorded ones
            if drop.any():
                self.writer.discard(np.flatnonzero(drop))
            # Whatever ends here: the next frame starts a whole episode.
            self._recording[ends] = self._armed[ends]
            if not continuous_arm:
                self._armed[ends] = False

    def flush(self) -> list[int]:
        """Commit finished episodes now (they are otherwise committed in groups); with
        `background`, they are queued and committed by the time `close` returns."""
        return self.writer.flush()

    def close(self) -> None:
        """Commit finished episodes, drop unfinished ones, release the store."""
        try:
            self.writer.close()
        finally:
            try:
                if self._appender is not None:
                    self._appender.close()
            finally:
                self.store.close()

    def __enter__(self) -> ChunkRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
