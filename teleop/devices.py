"""Teleop devices: what every input device offers the operator station.

A device maps its input to the robot's action space (the units and limits the robot host
announced in its welcome) and reports operator events. Continuous devices (keyboard,
gamepad, SpaceMouse) move a target that starts, at each takeover, from the robot's current
target, so taking over never makes the robot jump; absolute devices (a leader arm) give
positions directly.

Events: `takeover` toggles human control, `save` / `success` end and keep the episode
(`success` marks it successful), `discard` drops it, `rerecord` drops it and records the
same episode again, `stop` safe-stops the robot, `quit` ends the session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

TAKEOVER, SAVE, SUCCESS, DISCARD, RERECORD, STOP, QUIT = (
    "takeover",
    "save",
    "success",
    "discard",
    "rerecord",
    "stop",
    "quit",
)
EVENTS = (TAKEOVER, SAVE, SUCCESS, DISCARD, RERECORD, STOP, QUIT)


class DeviceUnavailableError(RuntimeError):
    """The device, its driver package, or a terminal for it is not there; the message says
    what to install or connect."""


@dataclass(frozen=True)
class ActionSpace:
    """The robot's action space as its host announced it."""

    names: tuple[str, ...]
    low: np.ndarray
    high: np.ndarray
    max_step: np.ndarray

    @classmethod
    def from_welcome(cls, robot: dict[str, Any]) -> ActionSpace:
        return cls(
            tuple(robot["action_names"]),
            np.asarray(robot["action_low"], dtype=np.float32),
            np.asarray(robot["action_high"], dtype=np.float32),
            np.asarray(robot["max_step"], dtype=np.float32),
        )

    @property
    def dim(self) -> int:
        return len(self.names)

    def shape(self, action: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """`action` moved into the limits and within `max_step` of `reference` (what the
        host's filter will accept), so a fast operator is slowed, not rejected."""
        a = np.asarray(action, dtype=np.float32)
        a = np.clip(a, reference - self.max_step * 0.999, reference + self.max_step * 0.999)
        return np.clip(a, self.low, self.high).astype(np.float32)


@dataclass
class DeviceInput:
    action: np.ndarray | None = None
    """The operator's action (None: the device has nothing to say this tick)."""
    events: list[str] = field(default_factory=list)


@runtime_checkable
class TeleopDevice(Protocol):
    name: str

    def connect(self, space: ActionSpace) -> None:
        """Open the device for this action space; raises `DeviceUnavailableError`."""
        ...

    def start(self, current: np.ndarray) -> None:
        """A takeover begins with the robot at target `current`."""
        ...

    def poll(self, frame: int, obs: dict[str, np.ndarray], dt: float) -> DeviceInput:
        """Read the device once per control tick (`frame`: index in the episode)."""
        ...

    def close(self) -> None: ...


class RateTarget:
    """The target a velocity-style device integrates (keyboard, gamepad, SpaceMouse)."""

    def __init__(self, space: ActionSpace) -> None:
        self.space = space
        self.value = np.clip(np.zeros(space.dim, np.float32), space.low, space.high)

    def reset(self, current: np.ndarray) -> None:
        self.value = np.asarray(current, dtype=np.float32).copy()

    def move(self, delta: np.ndarray) -> np.ndarray:
        self.value = np.clip(self.value + delta, self.space.low, self.space.high).astype(np.float32)
        return self.value.copy()


def make_device(spec: str, **options: Any) -> TeleopDevice:
    """`keyboard`, `gamepad`, `spacemouse`, `leader:<type>:<port>` or `virtual[:seed]`."""
    kind, _, rest = spec.partition(":")
    if kind == "keyboard":
        from unilab.teleop.keyboard import KeyboardDevice

        return KeyboardDevice()
    if kind == "gamepad":
        from unilab.teleop.gamepad import GamepadDevice

        return GamepadDevice()
    if kind == "spacemouse":
        from unilab.teleop.spacemouse import SpaceMouseDevice

        return SpaceMouseDevice()
    if kind == "leader":
        from unilab.teleop.leader_arm import LeaderArmDevice

        ltype, _, port = rest.partition(":")
        if not ltype or not port:
            raise DeviceUnavailableError(
                f"device {spec!r}: use leader:<type>:<port>, e.g. leader:so101_leader:/dev/ttyACM1"
            )
        return LeaderArmDevice(ltype, port)
    if kind == "virtual":
        from unilab.teleop.virtual_operator import VirtualOperator

        return VirtualOperator(seed=int(rest or options.get("seed", 0)))
    raise DeviceUnavailableError(
        f"device {spec!r}: expected keyboard, gamepad, spacemouse, leader:<type>:<port> or "
        "virtual[:seed]"
    )
