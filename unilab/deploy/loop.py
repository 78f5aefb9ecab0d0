"""The deploy control loop: observe → policy → check → act, at the robot's control rate.

Torch-free by design (the policy is an ONNX file run by onnxruntime): what runs next to a
robot should not need the training stack. Each tick is scheduled at t0 + k * period
(absolute, so errors do not accumulate); the loop sleeps until shortly before the tick and
spins the rest, and records how late each tick started (the period error) and how long
observe + inference + act took.

Safety: an action that is non-finite or larger than `max_action` in magnitude is never
sent. The loop sends the last safe action once more (hold) and stops; `DeployReport.ok`
is then false and the CLI exits with EXIT_SAFETY_STOP. Actions within `max_action` are
clipped to ±action_clip, as the task did in training. Before the first good action the
safe action is zero: the default pose for position robots, no force for force robots.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from unilab.robots.interface import Robot

EXIT_SAFETY_STOP = 4
COMPLETED, BAD_ACTION, INTERRUPTED = "completed", "bad_action", "interrupted"

PolicyFn = Callable[[np.ndarray], np.ndarray]


@dataclass
class DeployReport:
    steps: int
    """Actions sent from the policy (the hold after a stop not counted)."""
    control_dt: float
    period_s: float
    """Tick period actually used: control_dt / speed."""
    stop_reason: str
    """completed, bad_action or interrupted."""
    detail: str = ""
    period_error_mean_ms: float = 0.0
    """Mean of how late ticks started against their schedule."""
    period_error_p99_ms: float = 0.0
    period_error_max_ms: float = 0.0
    compute_mean_ms: float = 0.0
    """observe + policy + act per tick."""
    compute_p99_ms: float = 0.0
    overruns: int = 0
    """Ticks that started more than a period late (the schedule then restarts from them)."""
    held_action: list[float] | None = None
    """The action re-sent when the loop stopped on a bad action."""
    episodes: dict[str, Any] = field(default_factory=dict)
    """Episode returns/lengths where the robot reports them (SimRobot)."""

    @property
    def ok(self) -> bool:
        return self.stop_reason == COMPLETED

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


def bad_action_reason(action: np.ndarray, action_dim: int, max_action: float) -> str | None:
    """Why `action` must not be sent, or None when it is fine."""
    if action.shape != (action_dim,):
        return f"action has shape {action.shape}; expected ({action_dim},)"
    if not np.all(np.isfinite(action)):
        return f"non-finite action {action.tolist()}"
    peak = float(np.max(np.abs(action))) if action.size else 0.0
    if peak > max_action:
        return f"action magnitude {peak:.3g} exceeds the limit {max_action:g}"
    return None


def run_deploy(
    policy: PolicyFn,
    robot: Robot,
    *,
    obs_group: str,
    action_dim: int,
    action_clip: float,
    steps: int,
    speed: float = 1.0,
    max_action: float | None = None,
    spin_s: float = 3e-4,
) -> DeployReport:
    """Run `steps` control ticks; `speed` > 1 runs faster than real time (simulated robots).

    `max_action` defaults to 3 × action_clip: a policy pushing far past the range it was
    trained to saturate is out of its distribution.
    """
    if steps < 1:
        raise ValueError(f"steps={steps} must be at least 1")
    if not speed > 0:
        raise ValueError(f"speed={speed} must be positive")
    limit = 3.0 * action_clip if max_action is None else float(max_action)
    period = robot.control_dt / speed
    late = np.zeros(steps)
    compute = np.zeros(steps)
    safe: np.ndarray = np.zeros(action_dim, dtype=np.float32)
    reason, detail, held = COMPLETED, "", None
    done = 0
    start = time.perf_counter()
    overruns = 0
    try:
        for k in range(steps):
            deadline = start + k * period
            _wait_until(deadline, spin_s)
            tick = time.perf_counter()
            late[k] = tick - deadline
            if late[k] > period:
                overruns += 1
                start += late[k]  # restart the schedule here rather than rushing to catch up
            obs = robot.observe()
            action = np.asarray(policy(np.asarray(obs[obs_group], dtype=np.float32)))
            problem = bad_action_reason(action.astype(np.float32), action_dim, limit)
            if problem is not None:
                robot.act(safe)
                reason, detail, held = BAD_ACTION, f"step {k}: {problem}", safe.tolist()
                break
            safe = np.clip(action, -action_clip, action_clip).astype(np.float32)
            robot.act(safe)
            compute[k] = time.perf_counter() - tick
            done = k + 1
    except KeyboardInterrupt:
        robot.act(safe)
        reason, detail, held = INTERRUPTED, f"interrupted at step {done}", safe.tolist()
    return DeployReport(
        steps=done,
        control_dt=robot.control_dt,
        period_s=period,
        stop_reason=reason,
        detail=detail,
        period_error_mean_ms=_ms(np.mean(late[:done])) if done else 0.0,
        period_error_p99_ms=_ms(np.percentile(late[:done], 99)) if done else 0.0,
        period_error_max_ms=_ms(np.max(late[:done])) if done else 0.0,
        compute_mean_ms=_ms(np.mean(compute[:done])) if done else 0.0,
        compute_p99_ms=_ms(np.percentile(compute[:done], 99)) if done else 0.0,
        overruns=overruns,
        held_action=held,
        episodes=_episodes(robot),
    )


def _wait_until(deadline: float, spin_s: float) -> None:
    """Sleep to `spin_s` before the deadline (sleep overshoots by ~0.1 ms), then spin."""
    remaining = deadline - time.perf_counter()
    if remaining > spin_s:
        time.sleep(remaining - spin_s)
    while time.perf_counter() < deadline:
        pass


def _ms(seconds: float | np.floating) -> float:
    value = float(seconds) * 1e3
    return value if math.isfinite(value) else 0.0


def _episodes(robot: Robot) -> dict[str, Any]:
    returns = getattr(robot, "episode_returns", None)
    if returns is None:
        return {}
    return {
        "returns": [float(r) for r in returns],
        "lengths": [int(n) for n in getattr(robot, "episode_lengths", [])],
        "reasons": list(getattr(robot, "episode_reasons", [])),
        "reward_sum": float(sum(getattr(robot, "rewards", []))),
    }
