"""The robot host's safety filter and watchdog (pure numpy; no I/O).

Every command passes `SafetyFilter.check` before it can become the robot's target: it must
be finite, inside the joint limits, and within `max_step` of the last safe target. A
rejected command changes nothing (the robot keeps the last safe target) and is counted
under its reason. The watchdog trips when no valid command arrived for `periods` control
periods; the host then safe-stops the robot.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from unilab.teleop.protocol import NOT_FINITE, OUT_OF_RANGE, SHAPE, TOO_FAST, ProtocolError


class SafetyFilter:
    """Per-entry limits `low`/`high` and `max_step`, all (action_dim,) float32."""

    def __init__(self, low: np.ndarray, high: np.ndarray, max_step: np.ndarray) -> None:
        self.low = np.asarray(low, dtype=np.float32).copy()
        self.high = np.asarray(high, dtype=np.float32).copy()
        self.max_step = np.asarray(max_step, dtype=np.float32).copy()
        n = self.low.shape
        if self.high.shape != n or self.max_step.shape != n or len(n) != 1:
            raise ValueError("low, high and max_step must be (action_dim,) vectors of one length")
        if not (np.all(self.low <= self.high) and np.all(self.max_step > 0)):
            raise ValueError("limits need low <= high and max_step > 0 for every entry")
        self.target = np.clip(np.zeros_like(self.low), self.low, self.high)
        """The last safe target: what the robot is commanded to now."""
        self.rejects: Counter[str] = Counter()
        self.accepted = 0

    @property
    def action_dim(self) -> int:
        return int(self.low.shape[0])

    def reseat(self, target: np.ndarray) -> None:
        """Make `target` the last safe target (after a safe stop or a reset moved the robot);
        it is clipped into the limits."""
        self.target = np.clip(np.asarray(target, dtype=np.float32), self.low, self.high)

    def reason(self, command: np.ndarray) -> str | None:
        """Why `command` must not become the target, or None."""
        if command.shape != self.low.shape:
            return SHAPE
        if not np.all(np.isfinite(command)):
            return NOT_FINITE
        if np.any(command < self.low) or np.any(command > self.high):
            return OUT_OF_RANGE
        if np.any(np.abs(command - self.target) > self.max_step):
            return TOO_FAST
        return None

    def check(self, command: np.ndarray) -> np.ndarray:
        """Accept `command` as the new target (returned) or raise `ProtocolError`."""
        cmd = np.asarray(command, dtype=np.float32)
        why = self.reason(cmd)
        if why is not None:
            self.rejects[why] += 1
            raise ProtocolError(why, _describe(why, cmd, self))
        self.target = cmd.copy()
        self.accepted += 1
        return self.target


def _describe(why: str, cmd: np.ndarray, f: SafetyFilter) -> str:
    if why == SHAPE:
        return f"command has shape {cmd.shape}; expected ({f.action_dim},)"
    if why == NOT_FINITE:
        return "command holds NaN or infinity"
    if why == OUT_OF_RANGE:
        bad = np.flatnonzero((cmd < f.low) | (cmd > f.high))
        return f"entries {bad.tolist()} are outside the joint limits"
    bad = np.flatnonzero(np.abs(cmd - f.target) > f.max_step)
    return f"entries {bad.tolist()} change by more than max_step in one control period"


class Watchdog:
    """Trips when `now - last_feed > periods * period`."""

    def __init__(self, period_s: float, periods: int = 3) -> None:
        if period_s <= 0 or periods < 1:
            raise ValueError("watchdog needs a positive period and at least one period")
        self.timeout_s = float(period_s) * int(periods)
        self.last_feed: float | None = None

    def feed(self, now: float) -> None:
        self.last_feed = now

    def disarm(self) -> None:
        self.last_feed = None

    @property
    def armed(self) -> bool:
        return self.last_feed is not None

    def deadline(self) -> float | None:
        return None if self.last_feed is None else self.last_feed + self.timeout_s

    def expired(self, now: float) -> bool:
        d = self.deadline()
        return d is not None and now >= d
