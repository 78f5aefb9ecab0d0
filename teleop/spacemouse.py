"""3Dconnexion SpaceMouse teleop through pyspacemouse (the `spacemouse` extra:
`pip install 'unilab[spacemouse]'`; it needs the hidapi system library and read access to
the device's /dev/hidraw*).

The six axes (x, y, z, roll, pitch, yaw, each in [-1, 1]) drive action entries 0..5 at up
to `speed` of the joint range per second. Left button: take over / hand back; right
button: save the episode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unilab.teleop.devices import (
    SAVE,
    TAKEOVER,
    ActionSpace,
    DeviceInput,
    DeviceUnavailableError,
    RateTarget,
)

AXES = ("x", "y", "z", "roll", "pitch", "yaw")


def import_pyspacemouse() -> Any:
    try:
        import pyspacemouse
    except (ImportError, OSError) as exc:  # OSError: hidapi's shared library is missing
        raise DeviceUnavailableError(
            "the spacemouse device needs pyspacemouse and the hidapi library: pip install "
            f"'unilab[spacemouse]' and apt-get install libhidapi-hidraw0 ({exc})"
        ) from None
    return pyspacemouse


class SpaceMouseDevice:
    name = "spacemouse"

    def __init__(self, speed: float = 0.3) -> None:
        self.speed = speed
        self._sm: Any = None
        self._target: RateTarget | None = None
        self._buttons = [0, 0]

    def connect(self, space: ActionSpace) -> None:
        sm = import_pyspacemouse()
        if not sm.open():
            raise DeviceUnavailableError(
                "no SpaceMouse found: plug it in and allow this user to read /dev/hidraw* "
                "(a udev rule for vendor 256f or 046d)"
            )
        self._sm = sm
        self._target = RateTarget(space)

    def start(self, current: np.ndarray) -> None:
        assert self._target is not None
        self._target.reset(current)

    def poll(self, frame: int, obs: dict[str, np.ndarray], dt: float) -> DeviceInput:
        assert self._target is not None and self._sm is not None, "connect() first"
        state = self._sm.read()
        space = self._target.space
        axes = np.zeros(space.dim, np.float32)
        for i, name in enumerate(AXES[: space.dim]):
            axes[i] = float(getattr(state, name, 0.0))
        events: list[str] = []
        buttons = [*list(getattr(state, "buttons", [0, 0]))[:2], 0, 0]
        for i, event in enumerate((TAKEOVER, SAVE)):
            if buttons[i] and not self._buttons[i]:
                events.append(event)
        self._buttons = buttons[:2]
        delta = axes * (space.high - space.low) * self.speed * dt
        return DeviceInput(self._target.move(delta), events)

    def close(self) -> None:
        if self._sm is not None:
            close = getattr(self._sm, "close", None)
            if close is not None:
                close()
            self._sm = None
