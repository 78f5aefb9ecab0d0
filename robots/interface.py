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

`unilab.deploy.sim_robot.SimRobot` implements it over one env of a registered task. A real driver implements the
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
from typing import Protocol, runtime_checkable

import numpy as np


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

    @property
    def instruction(self) -> str | None:
        """The language instruction of the current episode when the robot knows it (a
        simulated task draws one); None for a real robot, whose instruction the operator
        gives (`unilab hil run --instruction`)."""
        ...
