"""Gamepad teleop through pygame/SDL (the `gamepad` extra: `pip install 'unilab[gamepad]'`).

Sticks and triggers move the target at up to `speed` of the joint range per second: axis i
drives action entry i. Buttons: A (0) take over / hand back, B (1) discard, X (2) save,
Y (3) save as success, Back (6) re-record, Start (7) safe-stop. SDL runs with its dummy
video driver, so no display is needed.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from unilab.teleop.devices import (
    DISCARD,
    RERECORD,
    SAVE,
    STOP,
    SUCCESS,
    TAKEOVER,
    ActionSpace,
    DeviceInput,
    DeviceUnavailableError,
    RateTarget,
)

BUTTONS = {0: TAKEOVER, 1: DISCARD, 2: SAVE, 3: SUCCESS, 6: RERECORD, 7: STOP}
DEADZONE = 0.1


def import_pygame() -> Any:
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import pygame
    except ImportError:
        raise DeviceUnavailableError(
            "the gamepad device needs pygame: pip install 'unilab[gamepad]' (or pygame>=2.5)"
        ) from None
    return pygame


class GamepadDevice:
    name = "gamepad"

    def __init__(self, index: int = 0, speed: float = 0.5) -> None:
        self.index = index
        self.speed = speed
        self._pg: Any = None
        self._stick: Any = None
        self._target: RateTarget | None = None

    def connect(self, space: ActionSpace) -> None:
        pg = import_pygame()
        pg.init()
        pg.joystick.init()
        count = pg.joystick.get_count()
        if count <= self.index:
            pg.quit()
            raise DeviceUnavailableError(
                f"no gamepad #{self.index} found (SDL sees {count}); plug one in and check "
                "that this user may read /dev/input/js* or /dev/input/event*"
            )
        self._pg = pg
        self._stick = pg.joystick.Joystick(self.index)
        self._stick.init()
        self._target = RateTarget(space)

    def start(self, current: np.ndarray) -> None:
        assert self._target is not None
        self._target.reset(current)

    def poll(self, frame: int, obs: dict[str, np.ndarray], dt: float) -> DeviceInput:
        assert self._target is not None and self._pg is not None, "connect() first"
        events: list[str] = []
        for ev in self._pg.event.get():
            if ev.type == self._pg.JOYBUTTONDOWN and ev.button in BUTTONS:
                events.append(BUTTONS[ev.button])
        space = self._target.space
        axes = np.zeros(space.dim, np.float32)
        for i in range(min(space.dim, self._stick.get_numaxes())):
            v = float(self._stick.get_axis(i))
            axes[i] = 0.0 if abs(v) < DEADZONE else v
        delta = axes * (space.high - space.low) * self.speed * dt
        return DeviceInput(self._target.move(delta), events)

    def close(self) -> None:
        if self._pg is not None:
            self._pg.quit()
            self._pg = None
