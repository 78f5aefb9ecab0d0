"""The deploy control loop: observe → check → policy → check → act, at the robot's rate.

Torch-free by design (the policy is an ONNX file run by onnxruntime): what runs next to a
robot should not need the training stack. Each tick is scheduled at t0 + k * period
(absolute, so errors do not accumulate); the loop sleeps until shortly before the tick and
spins the rest, and records how late each tick started (the period error) and how long
observe + inference + act took.

Safety (`SafetyLimits`, by default from the policy's export metadata):

- an observation that is non-finite, of the wrong width, or outside the configured bounds
  stops the loop (`bad_observation`): the policy never sees it;
- an action that is non-finite or larger than `max_action` in magnitude is never sent
  (`bad_action`); actions within it are clipped to ±action_clip, as the task did in
  training, and then rate-limited: no entry moves more than `max_action_delta` from the
  previous command in one step (counted in `DeployReport.rate_limited`);
- any exception in `observe`, the policy or `act` stops the loop (`error`), and so does
  SIGTERM (`terminated`; a second SIGTERM interrupts a call that hangs) and Ctrl-C
  (`interrupted`).

Whenever the loop stops early it sends the hold action (the last command sent; zero
before the first: the default pose for position robots, no force for force robots) and
returns a report whose `ok` is false; `exit_code` is what a command line should return.
"""

from __future__ import annotations

import math
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any

import numpy as np

from unilab.robots.interface import Robot

EXIT_SAFETY_STOP = 4
COMPLETED, BAD_ACTION, INTERRUPTED = "completed", "bad_action", "interrupted"
BAD_OBSERVATION, ERROR, TERMINATED = "bad_observation", "error", "terminated"
SAFETY_STOPS = (BAD_ACTION, BAD_OBSERVATION, ERROR)
"""Stop reasons that mean the robot was stopped for its safety (exit EXIT_SAFETY_STOP)."""

PolicyFn = Callable[[np.ndarray], np.ndarray]
"""The `obs_group` vector (obs_dim,) -> one (action_dim,) action."""
ObservationPolicyFn = Callable[[dict[str, np.ndarray]], np.ndarray]
"""The robot's whole observation {group: array} (images, instruction ids) -> one action;
with `run_deploy(..., full_observation=True)` (the VLA: `unilab.deploy.vla_deploy`)."""


@dataclass
class DeployReport:
    steps: int
    """Actions sent from the policy (the hold after a stop not counted)."""
    control_dt: float
    period_s: float
    """Tick period actually used: control_dt / speed."""
    stop_reason: str
    """completed, bad_action, bad_observation, error, terminated or interrupted."""
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
    """The hold action sent when the loop stopped early."""
    rate_limited: int = 0
    """Steps whose action was slowed to `max_action_delta` per step."""
    error: str = ""
    """The traceback when the loop stopped on an exception."""
    episodes: dict[str, Any] = field(default_factory=dict)
    """Episode returns/lengths where the robot reports them (SimRobot)."""

    @property
    def ok(self) -> bool:
        return self.stop_reason == COMPLETED

    @property
    def exit_code(self) -> int:
        """0 completed, EXIT_SAFETY_STOP after a safety stop, 128 + signal otherwise."""
        if self.ok:
            return 0
        if self.stop_reason in SAFETY_STOPS:
            return EXIT_SAFETY_STOP
        return 128 + int(signal.SIGTERM if self.stop_reason == TERMINATED else signal.SIGINT)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


@dataclass(frozen=True)
class SafetyLimits:
    """What the deploy loop lets through. Build with `SafetyLimits.from_metadata`."""

    max_action: float
    """An action entry beyond this magnitude stops the loop."""
    max_action_delta: float | None = None
    """Largest change of an action entry from one step to the next (policy units); None:
    not limited."""
    obs_low: np.ndarray | None = None
    obs_high: np.ndarray | None = None
    """Bounds of each entry of the policy's observation group (None: only finiteness)."""

    @classmethod
    def from_metadata(
        cls,
        meta: Any,
        *,
        max_action: float | None = None,
        max_action_delta: float | None = None,
        obs_bounds: Sequence[Sequence[float]] | None = None,
    ) -> SafetyLimits:
        """Limits of an exported policy (`PolicyMetadata`); arguments override it.

        `max_action` defaults to 3 × action_clip: a policy pushing far past the range it
        was trained to saturate is out of its distribution. `max_action_delta` and the
        observation bounds come from the metadata's `max_action_delta` and
        `obs_bounds[obs_group]` ([low, high] lists) when it has them.
        """
        limit = 3.0 * float(meta.action_clip) if max_action is None else float(max_action)
        delta = max_action_delta
        if delta is None:
            delta = getattr(meta, "max_action_delta", None)
        bounds: Any = obs_bounds
        if bounds is None:
            bounds = (getattr(meta, "obs_bounds", None) or {}).get(meta.obs_group)
        return cls.build(limit, delta, bounds, int(meta.obs_dims[meta.obs_group]))

    @classmethod
    def build(
        cls,
        max_action: float,
        max_action_delta: float | None = None,
        obs_bounds: Sequence[Sequence[float]] | None = None,
        obs_dim: int | None = None,
    ) -> SafetyLimits:
        if not max_action > 0:
            raise ValueError(f"max_action={max_action} must be positive")
        if max_action_delta is not None and not max_action_delta > 0:
            raise ValueError(f"max_action_delta={max_action_delta} must be positive or None")
        low = high = None
        if obs_bounds is not None:
            low = np.asarray(obs_bounds[0], dtype=np.float64)
            high = np.asarray(obs_bounds[1], dtype=np.float64)
            if low.shape != high.shape or (
                obs_dim is not None and low.shape not in ((), (obs_dim,))
            ):
                raise ValueError(
                    f"obs_bounds must be [low, high], each a number or {obs_dim} numbers; got "
                    f"shapes {low.shape} and {high.shape}"
                )
            if np.any(low > high):
                raise ValueError("obs_bounds: some low bound is above its high bound")
        return cls(
            float(max_action),
            None if max_action_delta is None else float(max_action_delta),
            low,
            high,
        )


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


def bad_observation_reason(obs: np.ndarray, obs_dim: int, limits: SafetyLimits) -> str | None:
    """Why `obs` must not reach the policy, or None when it is fine."""
    if obs.shape != (obs_dim,):
        return f"observation has shape {obs.shape}; expected ({obs_dim},)"
    if not np.all(np.isfinite(obs)):
        bad = np.flatnonzero(~np.isfinite(obs)).tolist()
        return f"non-finite observation entries {bad}"
    for bound, outside, word in (
        (limits.obs_low, np.less, "below"),
        (limits.obs_high, np.greater, "above"),
    ):
        if bound is None:
            continue
        bad = np.flatnonzero(outside(obs, bound))
        if bad.size:
            i = int(bad[0])
            edge = float(np.broadcast_to(bound, obs.shape)[i])
            return f"observation entry {i} = {float(obs[i]):.4g} is {word} its bound {edge:.4g}"
    return None


class _Terminated(BaseException):
    """A second SIGTERM: interrupts a robot call that hangs."""


@contextmanager
def _sigterm_flag() -> Iterator[list[int]]:
    """SIGTERM sets a flag the loop checks every tick; a second one raises `_Terminated`.
    Only in the main thread (Python runs signal handlers there)."""
    count = [0]
    if threading.current_thread() is not threading.main_thread():
        yield count
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        count[0] += 1
        if count[0] > 1:
            raise _Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield count
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_deploy(
    policy: PolicyFn | ObservationPolicyFn,
    robot: Robot,
    *,
    obs_group: str,
    action_dim: int,
    action_clip: float,
    steps: int,
    speed: float = 1.0,
    max_action: float | None = None,
    limits: SafetyLimits | None = None,
    obs_dim: int | None = None,
    spin_s: float = 3e-4,
    full_observation: bool = False,
) -> DeployReport:
    """Run `steps` control ticks; `speed` > 1 runs faster than real time (simulated robots).

    `full_observation`: the policy takes the robot's whole observation dict (an
    `ObservationPolicyFn`: camera images, instruction ids); the `obs_group` vector is still
    the one the safety checks read before the policy sees anything.

    `limits` (see `SafetyLimits.from_metadata`) default to `max_action` (3 × action_clip
    when None) with no rate limit and no observation bounds. `obs_dim`: the width of the
    policy's observation group (default: taken from the first observation).
    Never raises for a robot or policy failure: it holds, stops and reports it.
    """
    if steps < 1:
        raise ValueError(f"steps={steps} must be at least 1")
    if not speed > 0:
        raise ValueError(f"speed={speed} must be positive")
    if limits is None:
        limits = SafetyLimits.build(3.0 * action_clip if max_action is None else max_action)
    period = robot.control_dt / speed
    late = np.zeros(steps)
    compute = np.zeros(steps)
    hold: np.ndarray = np.zeros(action_dim, dtype=np.float32)  # the last command sent
    reason, detail, error = COMPLETED, "", ""
    done = rate_limited = overruns = 0
    stage = "observe"
    start = time.perf_counter()
    with _sigterm_flag() as sigterm:
        try:
            for k in range(steps):
                if sigterm[0]:
                    reason, detail = TERMINATED, f"SIGTERM before step {k}"
                    break
                deadline = start + k * period
                _wait_until(deadline, spin_s)
                tick = time.perf_counter()
                late[k] = tick - deadline
                if late[k] > period:
                    overruns += 1
                    start += late[k]  # restart the schedule here rather than rushing
                stage = "observe"
                observation = robot.observe()
                obs = np.asarray(observation[obs_group], dtype=np.float32)
                if obs_dim is None:
                    obs_dim = int(obs.shape[0]) if obs.ndim == 1 else -1
                problem = bad_observation_reason(obs, obs_dim, limits)
                if problem is not None:
                    reason, detail = BAD_OBSERVATION, f"step {k}: {problem}"
                    break
                stage = "policy"
                given: Any = observation if full_observation else obs
                action = np.asarray(policy(given)).astype(np.float32)
                problem = bad_action_reason(action, action_dim, limits.max_action)
                if problem is not None:
                    reason, detail = BAD_ACTION, f"step {k}: {problem}"
                    break
                command = np.clip(action, -action_clip, action_clip).astype(np.float32)
                if limits.max_action_delta is not None:
                    step = np.clip(
                        command - hold, -limits.max_action_delta, limits.max_action_delta
                    )
                    if np.any(hold + step != command):
                        rate_limited += 1
                        command = (hold + step).astype(np.float32)
                stage = "act"
                robot.act(command)
                hold = command
                compute[k] = time.perf_counter() - tick
                done = k + 1
        except KeyboardInterrupt:
            reason, detail = INTERRUPTED, f"interrupted at step {done}"
        except _Terminated:
            reason, detail = TERMINATED, f"second SIGTERM during {stage} at step {done}"
        except Exception as exc:
            reason = ERROR
            detail = f"{type(exc).__name__} in {stage} at step {done}: {exc}"
            error = traceback.format_exc()
        held = None
        if reason != COMPLETED:
            held = hold.tolist()
            try:
                robot.act(hold)
            except BaseException as exc:  # the hold itself failed: say so, loudly
                detail += f"; sending the hold action failed too ({type(exc).__name__}: {exc})"
                held = None
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
        rate_limited=rate_limited,
        error=error,
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
