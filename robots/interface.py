"""The one interface every robot, simulated or real, offers a controller.

A controller (the deploy loop, the HIL operator station) only ever calls these five
members, at the robot's control rate:

- `control_dt`: seconds between two actions (the rate the policy was trained at);
- `reset()`: bring the robot to its start state; returns the first observation;
- `observe()`: the newest observation, `{group: (d,) float32}` with the groups the policy
  was trained on (at least `policy`), in the layout of the export metadata's `obs_dims`;
- `act(action)`: apply one (action_dim,) action in policy units (a driver maps it to joint
  targets with the metadata's default_pose, action_scale, kp and kd); must not block for
  longer than a control period;
- `close()`: release the hardware (or the simulator).

`SimRobot` implements it over one env of a registered task. A real driver implements the
same members; nothing else in a controller changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from unilab.export.metadata import PolicyMetadata
    from unilab.tasks.base import Task


@runtime_checkable
class Robot(Protocol):
    @property
    def control_dt(self) -> float: ...

    def reset(self) -> dict[str, np.ndarray]: ...

    def observe(self) -> dict[str, np.ndarray]: ...

    def act(self, action: np.ndarray) -> None: ...

    def close(self) -> None: ...


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
        # The task stack loads here, not at import: robots sit below tasks in the layers.
        from unilab.deploy.sim_task import make_task_from_dicts

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
