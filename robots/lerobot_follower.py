"""`LeRobotDriver`: a LeRobot follower arm (SO-100/SO-101, Koch, OMX, ...) as a
`RobotDriver`, for a robot host running in LeRobot's environment.

Action units are LeRobot's motor positions: `<motor>.pos` entries in the order of the
robot's `action_features` (degrees with `use_degrees=True`, else LeRobot's normalized
-100..100 range; the gripper 0..100). Joint limits default to that range; `max_step` per
control tick defaults to 5 % of it (tighten both for your arm). LeRobot's own
`max_relative_target` is left to its config as a second guard.

Nothing here can be tested without the arm: `connect()` fails with
`LeRobotUnavailableError` when the port does not exist or lerobot is not installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from unilab.robots.interface import CameraSpec, StepOutcome
from unilab.robots.lerobot_compat import LeRobotUnavailableError, make_lerobot_robot

DEFAULT_RANGE = (-100.0, 100.0)
GRIPPER_RANGE = (0.0, 100.0)


class LeRobotDriver:
    def __init__(
        self,
        robot_type: str,
        port: str,
        *,
        robot_id: str | None = None,
        control_dt: float = 1.0 / 30.0,
        cameras: Mapping[str, Any] | None = None,
        limits: Mapping[str, tuple[float, float]] | None = None,
        max_step: float | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.robot_type = robot_type
        self.port = port
        self.robot_id = robot_id
        self._control_dt = float(control_dt)
        self._camera_configs = dict(cameras or {})
        self._limits = dict(limits or {})
        self._max_step_fraction = 0.05 if max_step is None else float(max_step)
        self._config = dict(config or {})
        self.robot: Any = None
        self._names: tuple[str, ...] = ()
        self._cameras: dict[str, CameraSpec] = {}
        self._last_obs: dict[str, Any] = {}

    # ------------------------------------------------------------------ lifecycle
    def connect(self) -> None:
        config = dict(self._config)
        if self.robot_id:
            config["id"] = self.robot_id
        if self._camera_configs:
            config["cameras"] = self._camera_configs
        robot = make_lerobot_robot(self.robot_type, self.port, **config)
        robot.connect(calibrate=True)  # interactive the first time an arm is used
        self.robot = robot
        self._names = tuple(k for k in robot.action_features if k.endswith(".pos"))
        self._cameras = {
            k: CameraSpec(int(v[0]), int(v[1]), int(v[2]))
            for k, v in robot.observation_features.items()
            if isinstance(v, tuple) and len(v) == 3
        }
        self._last_obs = robot.get_observation()

    def disconnect(self) -> None:
        if self.robot is not None:
            self.robot.disconnect()
            self.robot = None

    def close(self) -> None:
        self.disconnect()

    @property
    def is_connected(self) -> bool:
        return self.robot is not None and bool(getattr(self.robot, "is_connected", True))

    def _robot(self) -> Any:
        if self.robot is None:
            raise LeRobotUnavailableError("the LeRobot arm is not connected; call connect()")
        return self.robot

    # ------------------------------------------------------------------ description
    @property
    def name(self) -> str:
        return f"lerobot:{self.robot_type}"

    @property
    def control_dt(self) -> float:
        return self._control_dt

    @property
    def action_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def obs_dims(self) -> dict[str, int]:
        return {"policy": len(self._names)}

    @property
    def joint_limits(self) -> tuple[np.ndarray, np.ndarray]:
        low, high = [], []
        for n in self._names:
            default = GRIPPER_RANGE if n.startswith("gripper") else DEFAULT_RANGE
            lo, hi = self._limits.get(n, default)
            low.append(lo)
            high.append(hi)
        return np.asarray(low, np.float32), np.asarray(high, np.float32)

    @property
    def max_step(self) -> np.ndarray:
        low, high = self.joint_limits
        return ((high - low) * self._max_step_fraction).astype(np.float32)

    @property
    def cameras(self) -> dict[str, CameraSpec]:
        return dict(self._cameras)

    # ------------------------------------------------------------------ control
    def reset(self) -> dict[str, np.ndarray]:
        """A real arm is reset by a person; this only reads it again."""
        return self.observe()

    def _positions(self, obs: Mapping[str, Any]) -> np.ndarray:
        return np.asarray([float(obs[n]) for n in self._names], dtype=np.float32)

    def observe(self) -> dict[str, np.ndarray]:
        self._last_obs = self._robot().get_observation()
        return {"policy": self._positions(self._last_obs)}

    def act(self, action: np.ndarray) -> None:
        a = np.asarray(action, dtype=np.float32)
        self._robot().send_action({n: float(v) for n, v in zip(self._names, a, strict=True)})

    def outcome(self) -> StepOutcome:
        return StepOutcome()

    @property
    def instruction(self) -> str | None:
        return None  # a real arm does not know its task; the operator states it

    def hold_action(self) -> np.ndarray:
        low, high = self.joint_limits
        return np.clip(self._positions(self._robot().get_observation()), low, high)

    def safe_stop(self) -> np.ndarray:
        hold = self.hold_action()
        self.act(hold)
        return hold

    def read_cameras(self) -> dict[str, np.ndarray]:
        return {
            k: np.asarray(self._last_obs[k], dtype=np.uint8)
            for k in self._cameras
            if k in self._last_obs
        }
