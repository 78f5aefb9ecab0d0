"""A LeRobot leader arm (SO-100/SO-101, Koch, OMX leader) as a teleop device.

The leader's `get_action()` gives `<motor>.pos` positions; they map by name onto the
follower's action entries (the robot host's action names), so a leader drives the same
kind of follower one-to-one. Events come from a companion device (the keyboard by
default: space toggles the takeover), since a leader arm has no buttons.

Needs LeRobot's environment; absent package or port -> `LeRobotUnavailableError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unilab.robots.lerobot_compat import make_lerobot_teleoperator
from unilab.teleop.devices import ActionSpace, DeviceInput, DeviceUnavailableError, TeleopDevice


class LeaderArmDevice:
    name = "leader"

    def __init__(self, teleop_type: str, port: str, events: TeleopDevice | None = None) -> None:
        self.teleop_type = teleop_type
        self.port = port
        self.events = events
        self._leader: Any = None
        self._space: ActionSpace | None = None

    def connect(self, space: ActionSpace) -> None:
        leader = make_lerobot_teleoperator(self.teleop_type, self.port)
        leader.connect(calibrate=True)
        missing = [n for n in space.names if n not in leader.action_features]
        if missing:
            leader.disconnect()
            raise DeviceUnavailableError(
                f"leader {self.teleop_type} has no entries {missing} of the robot's action "
                f"space {list(space.names)}"
            )
        self._leader, self._space = leader, space
        if self.events is None:
            from unilab.teleop.keyboard import KeyboardDevice

            self.events = KeyboardDevice()
        self.events.connect(space)

    def start(self, current: np.ndarray) -> None:
        if self.events is not None:
            self.events.start(current)

    def poll(self, frame: int, obs: dict[str, np.ndarray], dt: float) -> DeviceInput:
        assert self._leader is not None and self._space is not None, "connect() first"
        values = self._leader.get_action()
        action = np.asarray([float(values[n]) for n in self._space.names], dtype=np.float32)
        events = self.events.poll(frame, obs, dt).events if self.events is not None else []
        return DeviceInput(action, events)

    def close(self) -> None:
        if self.events is not None:
            self.events.close()
        if self._leader is not None:
            self._leader.disconnect()
            self._leader = None
