"""Branching rollouts: several continuations of one state, side by side in a worker's envs.

A worker's envs form groups of `k` consecutive envs (env g*k leads group g). Every `every`
steps of the leader's episode, its full simulator and task state is copied into the other
k - 1 envs of its group (`Task.fork_env`), which then continue from that same state with
their own sampled actions. What a sibling was doing before the fork ends there as a
truncation (the learner bootstraps it from `next_obs`, as at a time-out).

The chunk's `branch_point` field is k at step t for every env of a group that forked right
after step t (0 elsewhere), so the learner knows the siblings: the k envs starting at a
multiple of k share the observation at t + 1, and PPO can score each sibling against their
mean return (a group-relative baseline, `algo.group_baseline`) besides GAE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from unilab.tasks.base import Task


class BranchingError(ValueError):
    """Branching settings that do not fit the task's envs."""


@dataclass(frozen=True)
class BranchPlan:
    k: int
    """Envs per group (the leader and k - 1 siblings)."""
    every: int
    """Leader episode steps between forks."""

    @classmethod
    def check(cls, k: int, every: int, num_envs: int) -> BranchPlan | None:
        """The plan for `num_envs` envs per worker, or None when k = 1 (no branching)."""
        if k <= 1:
            return None
        if every < 1:
            raise BranchingError(f"runtime.branching_every={every} must be >= 1 with k={k}")
        if num_envs % k:
            raise BranchingError(
                f"runtime.branching_k={k} must divide the envs per worker ({num_envs}); "
                f"e.g. {max(d for d in range(1, k + 1) if num_envs % d == 0)}"
            )
        return cls(int(k), int(every))

    def fork(
        self, task: Task, ended: np.ndarray
    ) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """Fork every group whose leader reached a multiple of `every` steps this step (and
        did not end). Returns (the (N,) mask of envs in forked groups, the observations of
        every env after the fork), or None when no group forked."""
        leaders = np.arange(0, task.num_envs, self.k)
        steps = task.episode_step[leaders]
        due = leaders[(steps > 0) & (steps % self.every == 0) & ~ended[leaders]]
        if due.size == 0:
            return None
        mask = np.zeros(task.num_envs, dtype=bool)
        for leader in due.tolist():
            mask[leader : leader + self.k] = True
            task.fork_env(leader, np.arange(leader + 1, leader + self.k))
        return mask, task.observation()
