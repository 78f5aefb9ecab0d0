"""SIGINT/SIGTERM handling for the main (learner) process.

The first signal only calls the callback (typically: set a flag the main loop checks, so it
can write a final checkpoint and call `Supervisor.shutdown()`); a second identical signal
raises SystemExit so a stuck main loop still ends (shutdown also runs from atexit).
Conventional exit codes: 128 + signal number (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from types import FrameType

DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code_for_signal(signum: int) -> int:
    return 128 + int(signum)


def install_signal_handlers(
    callback: Callable[[int], None], signals: Iterable[int] = DEFAULT_SIGNALS
) -> Callable[[], None]:
    """Route `signals` to `callback(signum)`; returns a function restoring the old handlers.

    Must be called from the main thread (Python delivers signals there only).
    """
    received: dict[int, int] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        received[signum] = received.get(signum, 0) + 1
        if received[signum] == 1:
            callback(signum)
        else:
            raise SystemExit(exit_code_for_signal(signum))

    previous = {int(s): signal.signal(s, handler) for s in signals}

    def restore() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    return restore


class StopSignal:
    """A flag for the main loop: ``stop = StopSignal.install()`` then ``while not stop: ...``."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @classmethod
    def install(cls, signals: Iterable[int] = DEFAULT_SIGNALS) -> StopSignal:
        flag = cls()
        install_signal_handlers(flag.set, signals)
        return flag

    def set(self, signum: int) -> None:
        self.signum = signum

    def __bool__(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """128 + signal number once a signal arrived, else 0."""
        return 0 if self.signum is None else exit_code_for_signal(self.signum)
