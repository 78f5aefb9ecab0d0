"""Keyboard teleop in a terminal (raw/cbreak mode through termios), so it works over SSH
with no display; no X server and no pynput.

Keys (one press = one step of 4 % of the joint range, held keys repeat as the terminal
repeats them):

    q w e r t y u i o p   raise action entry 0..9
    a s d f g h j k l ;   lower action entry 0..9
    space                 take over / hand back
    Enter                 save the episode        n   save it as a success
    Backspace             discard the episode     b   discard and re-record it
    x                     safe-stop the robot     Ctrl-C or Esc Esc   quit
"""

from __future__ import annotations

import os
import select
import sys
import termios
import tty
from typing import Any

import numpy as np

from unilab.teleop.devices import (
    DISCARD,
    QUIT,
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

RAISE_KEYS = "qwertyuiop"
LOWER_KEYS = "asdfghjkl;"
EVENT_KEYS = {
    " ": TAKEOVER,
    "\r": SAVE,
    "\n": SAVE,
    "n": SUCCESS,
    "\x7f": DISCARD,
    "\x08": DISCARD,
    "b": RERECORD,
    "x": STOP,
    "\x03": QUIT,
}
STEP_FRACTION = 0.04


class KeyboardDevice:
    """Reads keys from a terminal file descriptor (default: stdin) without blocking."""

    name = "keyboard"

    def __init__(self, fd: int | None = None, step_fraction: float = STEP_FRACTION) -> None:
        self.fd = sys.stdin.fileno() if fd is None else fd
        self.step_fraction = step_fraction
        self._saved: Any = None
        self._target: RateTarget | None = None
        self._escape = False

    def connect(self, space: ActionSpace) -> None:
        if not os.isatty(self.fd):
            raise DeviceUnavailableError(
                "the keyboard device needs a terminal: standard input is not a TTY. Run "
                "`unilab hil run` in an interactive shell (SSH is fine), or pick another "
                "device (--device gamepad|spacemouse|leader:<type>:<port>|virtual)"
            )
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)  # keys arrive one by one, output processing stays intact
        # Ctrl-C arrives as a key (quit, which releases the robot) rather than a signal that
        # would also flush the keys typed before it.
        attrs = termios.tcgetattr(self.fd)
        attrs[3] &= ~termios.ISIG
        termios.tcsetattr(self.fd, termios.TCSANOW, attrs)
        self._target = RateTarget(space)

    def start(self, current: np.ndarray) -> None:
        assert self._target is not None
        self._target.reset(current)

    def _keys(self) -> str:
        out = []
        while select.select([self.fd], [], [], 0)[0]:
            chunk = os.read(self.fd, 64)
            if not chunk:
                break
            out.append(chunk.decode("utf-8", errors="ignore"))
        return "".join(out)

    def poll(self, frame: int, obs: dict[str, np.ndarray], dt: float) -> DeviceInput:
        assert self._target is not None, "connect() first"
        space = self._target.space
        step = (space.high - space.low) * self.step_fraction
        delta = np.zeros(space.dim, np.float32)
        events: list[str] = []
        moved = False
        for ch in self._keys():
            if ch == "\x1b":
                if self._escape:
                    events.append(QUIT)
                self._escape = not self._escape
                continue
            self._escape = False
            if ch in EVENT_KEYS:
                events.append(EVENT_KEYS[ch])
            elif ch in RAISE_KEYS and RAISE_KEYS.index(ch) < space.dim:
                delta[RAISE_KEYS.index(ch)] += step[RAISE_KEYS.index(ch)]
                moved = True
            elif ch in LOWER_KEYS and LOWER_KEYS.index(ch) < space.dim:
                delta[LOWER_KEYS.index(ch)] -= step[LOWER_KEYS.index(ch)]
                moved = True
        action = self._target.move(delta) if moved else self._target.value.copy()
        return DeviceInput(action, events)

    def close(self) -> None:
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None
