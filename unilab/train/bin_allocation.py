"""The learner's side of reset-bin allocation (`runtime.allocation`).

For a task with reset bins (`Task.num_reset_bins` > 1) the published weight vector is the
actor's flat weights followed by one draw probability per bin; each sim worker loads the
actor from the head and hands the tail to its task (`unilab.runtime.sim_worker`), so bin
probabilities travel with the policy version that uses them, in sync, async and Ray modes
alike. After each batch the posteriors learn from the episodes that ended in it: the bin
from the chunk's `episode_bin` field, the outcome from the task's `success` metric at the
episode's last step (or return >= `runtime.allocation_success_return`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from unilab.config.errors import ConfigError
from unilab.config.schema import Config
from unilab.runtime.allocation import BinAllocator
from unilab.runtime.flat_weights import actor_to_flat
from unilab.runtime.rollout import SUCCESS_METRIC


class RolloutAllocation:
    def __init__(self, cfg: Config, reset_bins: int, task_metrics: list[str], seed: int) -> None:
        rt = cfg.runtime
        self.threshold = rt.allocation_success_return
        self.allocator: BinAllocator | None = None
        self._success_col: int | None = None
        if reset_bins <= 1:
            if rt.allocation != "uniform":
                raise ConfigError(
                    f"runtime.allocation={rt.allocation} needs a task with reset bins; task "
                    f"{cfg.task.name!r} has none (arm_reach: task.target_bins=[2,2,2])"
                )
            return
        if self.threshold is None:
            if SUCCESS_METRIC not in task_metrics:
                raise ConfigError(
                    f"task {cfg.task.name!r} has no {SUCCESS_METRIC!r} metric to score its "
                    "episodes for runtime.allocation: set runtime.allocation_success_return"
                )
            self._success_col = task_metrics.index(SUCCESS_METRIC)
        self.allocator = BinAllocator(
            reset_bins,
            rt.allocation,
            decay=rt.allocation_decay,
            floor=rt.allocation_floor,
            seed=seed,
        )
        self._reuse_probs = False

    @property
    def tail(self) -> int:
        """Floats after the actor's in the weight vector (0 without bins)."""
        return self.allocator.num_bins if self.allocator is not None else 0

    def num_floats(self, actor: nn.Module) -> int:
        return int(actor_to_flat(actor).size) + self.tail

    def weights(self, actor: nn.Module) -> np.ndarray:
        """The vector to publish: the actor's weights, then freshly drawn bin probabilities."""
        flat = actor_to_flat(actor)
        alloc = self.allocator
        if alloc is None:
            return flat
        if self._reuse_probs:  # a resumed run republishes what its checkpoint last sent
            self._reuse_probs = False
            return np.concatenate([flat, alloc.probs.astype(np.float32)])
        return np.concatenate([flat, alloc.draw_probs()])

    def learn(self, host_batch: dict[str, np.ndarray]) -> dict[str, float]:
        """Update the posteriors from one batch; returns the rows to log (per-bin draw
        probability, posterior success and the episodes seen)."""
        alloc = self.allocator
        if alloc is None:
            return {}
        bins = np.asarray(host_batch["episode_bin"]).reshape(-1)
        ended = bins >= 0
        if self._success_col is not None:
            metric = np.asarray(host_batch["task_metrics"])[..., self._success_col].reshape(-1)
            outcome = metric > 0.5
        else:
            assert self.threshold is not None
            outcome = np.asarray(host_batch["episode_return"]).reshape(-1) >= self.threshold
        stats = alloc.update(bins[ended].astype(np.int64), outcome[ended].astype(np.float64))
        row: dict[str, float] = {}
        for k in range(alloc.num_bins):
            row[f"alloc/prob_{k}"] = float(alloc.probs[k])
            row[f"alloc/success_{k}"] = float(alloc.mean_success[k])
            row[f"alloc/episodes_{k}"] = float(stats.episodes[k])
        return row

    def state_dict(self) -> dict[str, Any]:
        return {} if self.allocator is None else self.allocator.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.allocator is not None and state:
            self.allocator.load_state_dict(state)
            self._reuse_probs = True
