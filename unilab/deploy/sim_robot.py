"""`SimRobot`: one env of a registered task behind the `unilab.robots.interface.Robot` protocol.

It lives in `deploy/` (not `robots/`) because it builds a task from export metadata: robots sit
below tasks in the layers, and the protocol it implements stays in `robots/interface.py`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unilab.deploy.sim_task import make_task_from_dicts
from unilab.export.metadata import PolicyMetadata
from unilab.tasks.base import Task


class SimRobot:
    """One env of a task as a `Robot`. Episodes end and restart as in training (the task
    auto-resets); their returns, lengths and end reasons are kept for comparison with
    `unilab play`, which a real robot cannot report."""

    def __init__(
        self,
        task_config: dict[str, Any],
        sim_config: dict[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        self.task: Task = make_task_from_dicts(task_config, sim_config or {}, 1, seed)
        self._control_dt = float(self.task.control_dt)
        self._obs: dict[str, np.ndarray] | None = None
        self.steps = 0
        self.rewards: list[float] = []
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        self.episode_reasons: list[list[str]] = []
        self.last_action: np.ndarray | None = None

    @classmethod
    def for_policy(
        cls, meta: PolicyMetadata, task_name: str | None = None, seed: int = 0
    ) -> SimRobot:
        """The task the policy was trained on (its exported task config), or the named
        task with its defaults when `task_name` differs from the policy's task."""
        if task_name is None or task_name == meta.task:
            return cls(meta.task_config, meta.sim_config, seed)
        return cls({"name": task_name}, {}, seed)

    @property
    def control_dt(self) -> float:
        return self._control_dt

    @property
    def obs_dims(self) -> dict[str, int]:
        return self.task.obs_dims

    @property
    def action_dim(self) -> int:
        return int(self.task.action_dim)

    def reset(self) -> dict[str, np.ndarray]:
        self._obs = self.task.reset()
        return self.observe()

    def observe(self) -> dict[str, np.ndarray]:
        if self._obs is None:
            return self.reset()
        return {group: values[0].copy() for group, values in self._obs.items()}

    def act(self, action: np.ndarray) -> None:
        if self._obs is None:
            self.reset()
        batch = np.asarray(action, dtype=np.float32).reshape(1, self.action_dim)
        result = self.task.step(batch)
        self._obs = result.obs
        self.steps += 1
        self.rewards.append(float(result.reward[0]))
        self.last_action = batch[0].copy()
        if result.terminated[0] or result.truncated[0]:
            self.episode_returns.append(float(result.episode_return[0]))
            self.episode_lengths.append(int(result.episode_length[0]))
            self.episode_reasons.append(sorted(k for k, v in result.reasons.items() if v[0]))

    def close(self) -> None:
        self._obs = None
