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

`RobotDriver` extends it with what a robot host (unilab.teleop.robot_host) needs next to
real hardware: connect/disconnect, the action names and joint limits in action units, the
largest safe change of a command per control step, a safe stop that holds the robot where
it is, camera frames, and the outcome of the last step (reward/termination where the robot
can report them, as a simulated one can). Drivers: `unilab.deploy.sim_driver.SimDriver`
(one env of a registered task) and `unilab.robots.lerobot_follower.LeRobotDriver`.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class CameraSpec:
    """One camera of a robot: frames are (height, width, channels) uint8 RGB."""

    height: int
    width: int
    channels: int = 3

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, self.channels)


@dataclass(frozen=True)
class StepOutcome:
    """What the last `act` led to, where the robot can tell (a simulated one can; a real
    one reports reward 0 and never ends an episode by itself)."""

    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False


@runtime_checkable
class RobotDriver(Robot, Protocol):
    """A `Robot` a robot host drives next to the hardware. All vectors are (action_dim,)
    float32 in the driver's action units (policy units for a simulated task, joint
    positions for a LeRobot arm)."""

    @property
    def name(self) -> str: ...

    @property
    def action_names(self) -> tuple[str, ...]: ...

    @property
    def obs_dims(self) -> dict[str, int]: ...

    @property
    def joint_limits(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high): every command must lie inside, per action entry."""
        ...

    @property
    def max_step(self) -> np.ndarray:
        """Largest change of a command from one control step to the next, per entry."""
        ...

    @property
    def cameras(self) -> dict[str, CameraSpec]: ...

    @property
    def is_connected(self) -> bool: ...

    def connect(self) -> None:
        """Open the hardware (or build the simulator); raises a clear error when absent."""
        ...

    def disconnect(self) -> None: ...

    def hold_action(self) -> np.ndarray:
        """The command that keeps the robot where it is now (present joint positions for
        position control, zero for force control)."""
        ...

    def safe_stop(self) -> np.ndarray:
        """Stop moving now: command `hold_action()` and return it."""
        ...

    def read_cameras(self) -> dict[str, np.ndarray]:
        """The newest frame of every camera in `cameras`."""
        ...

    def outcome(self) -> StepOutcome: ...


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
