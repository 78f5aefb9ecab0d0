"""`FrameDataset`: a torch Dataset over the committed frames of an episode store.

Items are dicts of tensors: every requested field at frame t, plus optionally
- an action chunk of length H (`action`: (H, A)) with `action_is_pad` (H,) marking steps
  past the episode's end (those repeat the last action, as LeRobot does) and, in stores
  collected with perturbations (a `perturbed` column), steps after a perturbed one, and
- an n-step window: `nstep_reward` = Σ_j γ^j r_{t+j} over k = min(n, steps left) steps,
  `nstep_discount` = γ^k (0 when the episode terminated inside the window), `nstep_done`,
  `nstep_k`, `nstep_success` (it terminated inside the window and the episode's metadata
  says it succeeded), and `next/<field>` = the observation fields at frame t+k.

Windows never cross an episode boundary. The last frame of an episode that did not
terminate (truncated or unfinished) has no successor observation in the store, so with
n-step windows it is not an item: windows that reach it stop one frame earlier and
bootstrap from its observation.

With `outcome_targets`, items also carry the value heads' targets
(`policies/vla/value_heads.py`), from each episode's `success` metadata and timestamps:
`target/success` (1.0 if the episode succeeded), and on successful episodes of T frames
`target/progress` = (t + 1) / T and `target/time_to_go` = timestamp[T-1] - timestamp[t]
seconds, with `target/has_progress` 1.0 (on failed episodes all three are 0: undefined).

A store with a float `weight` column (a curated store) gives each item that weight
(`item_weights`, read by `WeightedFrameSampler`); other stores weigh every item 1.

Vector columns are loaded into memory once (fast random access). Camera images are read
from the store per batch, or, with `image_cache_bytes`, loaded into memory once when all of
them fit in that many bytes: a batch is then a plain uint8 gather instead of decompressing
zarr chunks, which bounded a GPU learner at ~1k samples/s (bench/results/gpu/). `batch(indices)`
builds a whole batch with vectorized gathers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from unilab.data.errors import SchemaMismatchError
from unilab.data.schema import INTERVENED_TAG, SCENE_TAG, TASK_SUCCESS_TAG
from unilab.data.store import EpisodeStore

PERTURBED_FIELD = "perturbed"
"""Optional per-frame bool column: the executed action was perturbed (`unilab collect
action_noise=...`); a chunk's actions after such a step are padding (`action_is_pad`)."""
WEIGHT_FIELD = "weight"
"""Optional per-frame float column of learning weights (written by `unilab data curate`)."""


class FrameDataset(Dataset[dict[str, torch.Tensor]]):
    """Frames of a store (a snapshot of its committed frames when built).

    `fields`: which schema fields to return (default: all). `action_horizon`: return action
    chunks of this length. `n_step`, `gamma`: return n-step windows. `outcome_targets`:
    return the value heads' `target/...` fields (needs every episode's success metadata).
    """

    def __init__(
        self,
        store: EpisodeStore | str | os.PathLike[str],
        *,
        fields: Sequence[str] | None = None,
        action_horizon: int | None = None,
        n_step: int | None = None,
        gamma: float = 0.99,
        image_cache_bytes: int = 0,
        outcome_targets: bool = False,
    ) -> None:
        own = not isinstance(store, EpisodeStore)
        st = store if isinstance(store, EpisodeStore) else EpisodeStore.open(store, "r")
        self.path = Path(st.path)
        schema = st.schema
        self.fields = list(fields) if fields is not None else schema.names
        unknown = [f for f in self.fields if f not in schema.fields]
        if unknown:
            raise KeyError(f"unknown field(s) {unknown}; the store's fields are {schema.names}")
        if action_horizon is not None and action_horizon < 1:
            raise ValueError(f"action_horizon must be >= 1, got {action_horizon}")
        if n_step is not None and n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if image_cache_bytes < 0:
            raise ValueError(
                f"image_cache_bytes must be >= 0 (0: no cache), got {image_cache_bytes}"
            )
        self.action_horizon = action_horizon
        self.n_step = n_step
        self.gamma = float(gamma)
        self.num_frames = st.num_frames
        self.image_fields = {n for n in schema.fields if schema.fields[n].is_image}
        self.obs_fields = [n for n in schema.observation_fields if n in self.fields]

        lengths = st.lengths.copy()
        starts = st.starts.copy()
        self.episode_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        self.episode_start = np.repeat(starts, lengths)
        self.episode_end = self.episode_start + np.repeat(lengths, lengths)

        need = set(self.fields) | {"origin", "terminated"}
        if outcome_targets:
            need.add("timestamp")
        if WEIGHT_FIELD in schema.fields:
            need.add(WEIGHT_FIELD)
        if action_horizon is not None:
            need.add("action")
            if PERTURBED_FIELD in schema.fields:
                need.add(PERTURBED_FIELD)
        if n_step is not None:
            need |= {"reward", *self.obs_fields}
        self._columns: dict[str, np.ndarray] = {
            n: st.read(n) for n in sorted(need) if n not in self.image_fields
        }
        wanted = sorted(n for n in self.image_fields if n in self.fields)
        image_bytes = sum(
            self.num_frames
            * int(np.prod(schema.fields[n].shape))
            * np.dtype(schema.fields[n].dtype).itemsize
            for n in wanted
        )
        self.images_cached = bool(wanted) and 0 < image_bytes <= image_cache_bytes
        """Whether the camera images were loaded into memory (they fit the cache)."""
        self._images: dict[str, np.ndarray] = (
            {n: st.read(n) for n in wanted} if self.images_cached else {}
        )
        # Per episode: did it succeed (metadata)? n-step windows that reach a successful
        # episode's termination carry `nstep_success` (world models learn outcomes from it).
        metas = st.all_meta()
        self.episode_tasks = [m.task for m in metas]
        """Each episode's `task` metadata ('' where none)."""
        self.episode_outcomes: list[bool | None] = [m.success for m in metas]
        """Each episode's `success` metadata (None where unknown)."""
        self.episode_failed_rescue = [
            m.tags.get(INTERVENED_TAG) is True and m.tags.get(TASK_SUCCESS_TAG) is False
            for m in metas
        ]
        """Each episode: a takeover drove it and still failed the task (`PlayRecorder`'s
        `intervened` and `task_success` tags), so its intervention frames are no
        demonstration."""
        self.episode_scenes: list[str | None] = [
            None if m.tags.get(SCENE_TAG) is None else str(m.tags[SCENE_TAG]) for m in metas
        ]
        """Each episode's start (`scene` tag; None where not recorded): equal values started
        from the same scene."""
        self._episode_success = np.array([m.success is True for m in metas], bool)
        self._outcome: dict[str, np.ndarray] = (
            self._outcome_targets([m.success for m in metas]) if outcome_targets else {}
        )
        self._store: EpisodeStore | None = st
        self._own_store = own

        self.indices: np.ndarray
        if n_step is None:
            self.indices = np.arange(self.num_frames, dtype=np.int64)
        else:
            last = self.episode_end - 1
            is_last = np.arange(self.num_frames) == last
            ends_open = ~self._columns["terminated"][last]
            self.indices = np.flatnonzero(~(is_last & ends_open)).astype(np.int64)

    def _outcome_targets(self, success: list[bool | None]) -> dict[str, np.ndarray]:
        """Per-frame value-head targets (see the module doc), float32."""
        unknown = [i for i, s in enumerate(success) if s is None]
        if unknown:
            raise SchemaMismatchError(
                f"{self.path}: outcome targets need every episode's success metadata (True "
                f"or False); {len(unknown)} of {len(success)} episodes have none (e.g. "
                f"episodes {unknown[:5]}). Record outcomes (EpisodeMeta.success) or train "
                "without value heads (algo.value_weight=0)"
            )
        ok = np.asarray(success, dtype=bool)[self.episode_of]
        frame = np.arange(self.num_frames)
        length = self.episode_end - self.episode_start
        stamp = self._columns["timestamp"]
        # Timestamps, not frame counts x dt: they are what the store records for every
        # origin (derived from metadata fps when a writer gave only that).
        to_go = stamp[self.episode_end - 1] - stamp[frame] if self.num_frames else stamp
        return {
            "target/success": ok.astype(np.float32),
            "target/progress": np.where(ok, (frame - self.episode_start + 1) / length, 0.0).astype(
                np.float32
            ),
            "target/time_to_go": np.where(ok, to_go, 0.0).astype(np.float32),
            "target/has_progress": ok.astype(np.float32),
        }

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None  # reopened lazily in the worker process
        return state

    def _reader(self) -> EpisodeStore:
        if self._store is None:
            self._store = EpisodeStore.open(self.path, "r")
            self._own_store = True
        return self._store

    def close(self) -> None:
        if self._store is not None and self._own_store:
            self._store.close()
        self._store = None

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return len(self.indices)

    @property
    def origins(self) -> np.ndarray:
        """(len(self),) uint8 origin code of each item (for `WeightedOriginSampler`)."""
        return self._columns["origin"][self.indices]

    @property
    def item_weights(self) -> np.ndarray:
        """(len(self),) float64 weight of each item: the store's `weight` column (curated
        stores, `unilab data curate`), else ones. Samplers and losses may use it."""
        if WEIGHT_FIELD not in self._columns:
            return np.ones(len(self), dtype=np.float64)
        return self._columns[WEIGHT_FIELD][self.indices].astype(np.float64)

    def frame_column(self, name: str) -> np.ndarray:
        """A per-frame core or vector column over all the snapshot's frames, in store order
        (kept in memory when loaded, else read once): what samplers and advantage
        estimates (`awr_flow`) read without touching images."""
        if name in self.image_fields:
            raise KeyError(f"{name!r} is an image field; frame_column reads vector columns")
        if name not in self._columns:
            self._columns[name] = self._reader().read(name, 0, self.num_frames)
        return self._columns[name]

    def frame_index(self, item: int) -> int:
        """The store frame that dataset item `item` starts at."""
        return int(self.indices[item])

    def _gather(self, name: str, rows: np.ndarray) -> np.ndarray:
        if name not in self.image_fields:
            return self._columns[name][rows]
        if name in self._images:
            return self._images[name][rows]
        return self._reader().read_rows(name, rows)

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        n = len(self)
        if not -n <= item < n:
            raise IndexError(f"item {item} out of range for a dataset of {n} items")
        batch = self.batch(np.array([item % n]))
        return {k: v[0] for k, v in batch.items()}

    def batch(self, items: Sequence[int] | np.ndarray) -> dict[str, torch.Tensor]:
        """A batch of items as stacked tensors (vectorized; use it for fast sampling)."""
        t = self.indices[np.asarray(items, dtype=np.int64)]
        end = self.episode_end[t]
        out: dict[str, np.ndarray] = {
            "episode_index": self.episode_of[t],
            "frame_index": t - self.episode_start[t],
        }
        for name in self.fields:
            if name == "action" and self.action_horizon is not None:
                continue
            out[name] = self._gather(name, t)
        if self.action_horizon is not None:
            offs = t[:, None] + np.arange(self.action_horizon)[None, :]
            rows = np.minimum(offs, end[:, None] - 1)
            pad = offs >= end[:, None]
            if PERTURBED_FIELD in self._columns:
                # Action j of the chunk answers the state the clean actions t..t+j-1 led to;
                # after a perturbed step the rest were the expert's answer to other states.
                hit = self._columns[PERTURBED_FIELD][rows] & ~pad
                pad |= np.cumsum(hit, axis=1) - hit > 0
            out["action_is_pad"] = pad
            out["action"] = self._gather("action", rows)
        if self.n_step is not None:
            out.update(self._n_step(t, end))
        for name, column in self._outcome.items():
            out[name] = column[t]
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}

    def _n_step(self, t: np.ndarray, end: np.ndarray) -> dict[str, np.ndarray]:
        assert self.n_step is not None
        n, gamma = self.n_step, self.gamma
        terminal = self._columns["terminated"][end - 1]
        steps_left = np.where(terminal, end - t, end - 1 - t)
        k = np.minimum(n, steps_left)
        j = np.arange(n)[None, :]
        rows = np.minimum(t[:, None] + j, end[:, None] - 1)
        weights = np.where(j < k[:, None], gamma**j, 0.0)
        ret = (self._columns["reward"][rows] * weights).sum(axis=1)
        done = terminal & (t + k == end)
        nxt = np.minimum(t + k, end - 1)
        out: dict[str, np.ndarray] = {
            "nstep_reward": ret.astype(np.float32),
            "nstep_discount": np.where(done, 0.0, gamma**k).astype(np.float32),
            "nstep_done": done,
            "nstep_success": done & self._episode_success[self.episode_of[t]],
            "nstep_k": k.astype(np.int64),
        }
        for name in self.obs_fields:
            out[f"next/{name}"] = self._gather(name, nxt)
        return out
