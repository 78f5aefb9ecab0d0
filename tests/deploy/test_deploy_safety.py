"""The deploy loop always holds: on an exception in observe/policy/act, on SIGTERM, on a bad
observation; and it rate-limits actions. Real SimRobot (cart-pole task); faults are
injected by a wrapper around it.

On main only KeyboardInterrupt was caught: an exception propagated with no hold sent, and
SIGTERM took the default action (here: the test's own handler raising past the loop).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType, SimpleNamespace

import numpy as np
import pytest

from unilab.deploy.loop import (
    BAD_OBSERVATION,
    COMPLETED,
    ERROR,
    EXIT_SAFETY_STOP,
    TERMINATED,
    DeployReport,
    PolicyFn,
    SafetyLimits,
    run_deploy,
)
from unilab.deploy.sim_robot import SimRobot

CLIP = 1.0


class FaultyRobot:
    """A SimRobot whose k-th observe/act raises, hangs or returns a doctored observation;
    it records every command it was sent."""

    def __init__(self, fault: str = "", at: int = -1, value: float = np.nan) -> None:
        self.robot = SimRobot({"name": "cartpole_balance"}, {}, seed=0)
        self.robot.reset()
        self.fault, self.at, self.value = fault, at, value
        self.observed = 0
        self.sent: list[np.ndarray] = []

    @property
    def control_dt(self) -> float:
        return self.robot.control_dt

    def reset(self) -> dict[str, np.ndarray]:
        return self.robot.reset()

    def observe(self) -> dict[str, np.ndarray]:
        k = self.observed
        self.observed += 1
        if self.fault == "observe" and k == self.at:
            raise ConnectionError("encoder bus timed out (injected)")
        obs = self.robot.observe()
        if self.fault == "bad_obs" and k == self.at:
            obs["policy"][1] = self.value
        return obs

    def act(self, action: np.ndarray) -> None:
        k = len(self.sent)
        self.sent.append(np.array(action, dtype=np.float32))
        if self.fault == "act" and k == self.at:
            raise OSError("motor driver rejected the command (injected)")
        if self.fault == "hang_act" and k == self.at:
            time.sleep(10.0)  # a driver call that never returns in time
        self.robot.act(action)

    def close(self) -> None:
        self.robot.close()


def _policy(obs: np.ndarray) -> np.ndarray:
    return np.array([0.5 * np.tanh(obs[0] + obs[1])], dtype=np.float32)


def _run(
    robot: FaultyRobot,
    steps: int = 60,
    policy: PolicyFn = _policy,
    limits: SafetyLimits | None = None,
) -> DeployReport:
    return run_deploy(
        policy,
        robot,
        obs_group="policy",
        action_dim=1,
        action_clip=CLIP,
        steps=steps,
        speed=50.0,
        limits=limits,
    )


@pytest.fixture
def sigterm_reaches_test() -> Iterator[None]:
    """A SIGTERM the loop does not handle fails the test instead of killing pytest."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise RuntimeError("SIGTERM was not handled by the deploy loop")

    previous = signal.signal(signal.SIGTERM, handler)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("stage", ["observe", "policy", "act"])
def test_exception_anywhere_holds_and_stops(stage: str) -> None:
    robot = FaultyRobot(stage if stage != "policy" else "", at=20)

    def policy(obs: np.ndarray) -> np.ndarray:
        if stage == "policy" and robot.observed == 21:
            raise ValueError("onnxruntime failed (injected)")
        return _policy(obs)

    report = _run(robot, policy=policy)
    assert report.stop_reason == ERROR and not report.ok
    assert report.exit_code == EXIT_SAFETY_STOP
    assert report.steps == 20 and "injected" in report.error
    assert f"in {stage} at step 20" in report.detail
    # The last command the robot got is the hold: the last good command, sent again.
    last_good = robot.sent[19]
    np.testing.assert_array_equal(robot.sent[-1], last_good)
    assert report.held_action == pytest.approx(last_good.tolist())


def test_sigterm_holds_and_stops(sigterm_reaches_test: None) -> None:
    robot = FaultyRobot()

    def policy(obs: np.ndarray) -> np.ndarray:
        if robot.observed == 15:
            os.kill(os.getpid(), signal.SIGTERM)
        return _policy(obs)

    report = _run(robot, policy=policy)
    assert report.stop_reason == TERMINATED and report.exit_code == 143
    assert report.steps == 15
    np.testing.assert_array_equal(robot.sent[-1], robot.sent[14])
    assert len(robot.sent) == 16  # 15 commands, then the hold
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # handler restored


def test_second_sigterm_interrupts_a_hanging_act(sigterm_reaches_test: None) -> None:
    robot = FaultyRobot("hang_act", at=5)
    pid = os.getpid()
    timers = [threading.Timer(t, os.kill, (pid, signal.SIGTERM)) for t in (0.4, 0.7)]
    for timer in timers:
        timer.start()
    t0 = time.perf_counter()
    report = _run(robot)
    assert time.perf_counter() - t0 < 5.0
    assert report.stop_reason == TERMINATED and "during act" in report.detail
    np.testing.assert_array_equal(robot.sent[-1], robot.sent[4])  # hold = last command sent


@pytest.mark.parametrize("value", [np.nan, np.inf, 50.0])
def test_bad_observation_never_reaches_the_policy(value: float) -> None:
    robot = FaultyRobot("bad_obs", at=12, value=value)
    seen: list[np.ndarray] = []

    def policy(obs: np.ndarray) -> np.ndarray:
        seen.append(obs.copy())
        return _policy(obs)

    limits = SafetyLimits.build(3.0, obs_bounds=[-10.0, 10.0], obs_dim=5)
    report = _run(robot, policy=policy, limits=limits)
    assert report.stop_reason == BAD_OBSERVATION and report.steps == 12
    assert report.exit_code == EXIT_SAFETY_STOP
    assert len(seen) == 12 and all(np.all(np.abs(o) <= 10.0) for o in seen)
    np.testing.assert_array_equal(robot.sent[-1], robot.sent[11])


def test_actions_are_rate_limited() -> None:
    robot = FaultyRobot()
    flip = [1.0]

    def bang_bang(obs: np.ndarray) -> np.ndarray:
        flip[0] = -flip[0]
        return np.array([flip[0]], dtype=np.float32)

    report = _run(robot, steps=40, policy=bang_bang, limits=SafetyLimits.build(3.0, 0.25))
    assert report.stop_reason == COMPLETED and report.rate_limited == 40
    sent = np.array([a[0] for a in robot.sent])
    steps = np.abs(np.diff(np.concatenate([[0.0], sent])))
    assert steps.max() <= 0.25 + 1e-6
    free = _run(FaultyRobot(), steps=40, policy=bang_bang)  # no limit: full swings
    assert free.rate_limited == 0


def test_limits_from_metadata_and_overrides() -> None:
    meta = SimpleNamespace(
        action_clip=1.0,
        obs_group="policy",
        obs_dims={"policy": 3},
        max_action_delta=0.1,
        obs_bounds={"policy": [[-1, -2, -3], [1, 2, 3]]},
    )
    limits = SafetyLimits.from_metadata(meta)
    assert limits.max_action == 3.0 and limits.max_action_delta == 0.1
    assert limits.obs_high is not None and limits.obs_high.tolist() == [1, 2, 3]
    assert SafetyLimits.from_metadata(meta, max_action_delta=0.5).max_action_delta == 0.5
    old = SimpleNamespace(action_clip=2.0, obs_group="policy", obs_dims={"policy": 3})
    plain = SafetyLimits.from_metadata(old)  # metadata exported before these fields
    assert plain.max_action == 6.0 and plain.max_action_delta is None and plain.obs_low is None
    with pytest.raises(ValueError, match="obs_bounds"):
        SafetyLimits.from_metadata(meta, obs_bounds=[[0, 0], [1, 1]])
    with pytest.raises(ValueError, match="low bound is above"):
        SafetyLimits.build(1.0, obs_bounds=[1.0, -1.0])
