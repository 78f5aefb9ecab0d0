"""One simulated robot of `unilab fleet sim`, as its own process: a real robot host
(`RobotHost` over a `SimDriver`, safety filter, watchdog, CurveZMQ sockets) with an
on-board policy, reporting to a fleet server.

The work: arm_reach with its target moving on a slow circle (a part on a conveyor), so a
healthy arm is always in motion and a still one is a real stall. The policy is an
exported ONNX policy when given (`--policy`), else a damped least-squares tracker.
Predicted success, when the policy gives none: exp(-(d - 5 cm) / 5 cm) of the tracking
distance d, reported from one second into the episode (before that the arm is still
coming from its home pose and there is no fair prediction).

Faults, injected on request (`--stall-after`, `--fail-after`, or signals):

    SIGUSR1   stall: the arm jams (the simulation stops advancing; the host keeps running)
    SIGUSR2   failure: the policy aims 30 cm off target, so the tracking error grows

A reset (from the fleet dashboard or a station) clears both, as clearing a jam would.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
from typing import Any

import numpy as np

from unilab.deploy.sim_driver import SimDriver
from unilab.robots.interface import StepOutcome

TASK = "arm_reach"
CIRCLE_CENTER = np.array([0.45, 0.0, 0.32])
CIRCLE_RADIUS = 0.1
CIRCLE_RAD_S = 1.2
FAIL_OFFSET = np.array([0.0, 0.0, -0.3])
PREDICT_AFTER_S = 1.0


class FleetSimDriver(SimDriver):
    """`SimDriver` over arm_reach with a moving target and injectable faults."""

    def __init__(self, *, seed: int = 0, cameras: tuple[str, ...] = ("scene",)) -> None:
        super().__init__(
            {"name": TASK, "init_joint_noise": 0.05},
            seed=seed,
            cameras=cameras,
            camera_height=48,
            camera_width=64,
        )
        self.phase = (seed * 0.7) % (2 * math.pi)
        self.jammed = False
        self.failing = False
        self.steps = 0
        self.stall_at: float | None = None
        self.fail_at: float | None = None
        """Monotonic times of scheduled faults (`--stall-after`, `--fail-after`)."""

    @property
    def episode_steps(self) -> int:
        return int(getattr(self._task(), "max_episode_steps", 0))

    def goal(self) -> np.ndarray:
        angle = self.phase + CIRCLE_RAD_S * self.steps * self.control_dt
        offset = np.array([0.0, math.cos(angle), math.sin(angle)]) * CIRCLE_RADIUS
        return CIRCLE_CENTER + offset

    def act(self, action: np.ndarray) -> None:
        now = time.monotonic()
        if self.stall_at is not None and now >= self.stall_at:
            self.jammed, self.stall_at = True, None
        if self.fail_at is not None and now >= self.fail_at:
            self.failing, self.fail_at = True, None
        if self.jammed:  # nothing moves; the last outcome stands
            self._outcome = StepOutcome()
            return
        self.steps += 1
        task: Any = self._task()
        task.set_target(np.array([0]), self.goal()[None])
        super().act(action)

    def reset(self) -> dict[str, np.ndarray]:
        self.jammed = self.failing = False
        return super().reset()


class Tracker:
    """Damped least-squares steps of the end effector toward the (moving) target."""

    def __init__(self, driver: FleetSimDriver, max_dq: float = 0.08) -> None:
        self.driver = driver
        self.max_dq = max_dq
        task: Any = driver._task()
        self.hand = task.model.body("hand").id

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        task: Any = self.driver._task()
        goal = task.target[0] + (FAIL_OFFSET if self.driver.failing else 0.0)
        ee = task.ee_pos[:1].copy()
        jacp, _ = task.sim.batch.jac(self.hand, ee)
        jac = jacp[0][:, task._dof_adr]
        err = goal - ee[0]
        dq = jac.T @ np.linalg.solve(jac @ jac.T + 1e-2 * np.eye(3), err)
        q = task.joint_pos[0] + np.clip(dq, -self.max_dq, self.max_dq)
        action = np.zeros(task.action_dim, dtype=np.float32)
        action[:7] = (q - task._default_pose) / task.robot.action_scale
        return action


def predicted_success(driver: FleetSimDriver, episode_step: int) -> float | None:
    if episode_step * driver.control_dt < PREDICT_AFTER_S:
        return None
    task: Any = driver._task()
    d = float(np.linalg.norm(task.target[0] - task.ee_pos[0]))
    return float(math.exp(-max(0.0, d - 0.05) / 0.05))


def make_autopilot(driver: FleetSimDriver, host_ref: list[Any], policy: str | None) -> Any:
    if policy:
        from unilab.teleop.policy_runner import load_hil_policy

        hil = load_hil_policy(policy)

        def run_policy(obs: dict[str, np.ndarray]) -> tuple[np.ndarray, float | None]:
            step = hil(obs)
            action = step.action
            if driver.failing:
                action = -action
            p = step.predicted_success
            if p is None and host_ref:
                p = predicted_success(driver, host_ref[0].episode_step)
            return action, p

        return run_policy
    tracker = Tracker(driver)

    def run_tracker(obs: dict[str, np.ndarray]) -> tuple[np.ndarray, float | None]:
        p = predicted_success(driver, host_ref[0].episode_step) if host_ref else None
        return tracker(obs), p

    return run_tracker


def bind_free_ports(key: str, allow: str, tries: int = 20) -> Any:
    """The host's sockets on a free port and the one after it (the HIL link puts status at
    command port + 1). The OS picks the first; when another process holds the second, pick
    again rather than fail: twelve hosts starting at once on one machine do collide."""
    import errno

    import zmq

    from unilab.teleop.link import HostSockets

    for attempt in range(tries):
        context: zmq.Context[Any] = zmq.Context()
        try:
            sockets = HostSockets.bind(
                secret_key=key, allow_dir=allow, endpoint="tcp://127.0.0.1:0", context=context
            )
        except zmq.ZMQError as exc:
            context.term()
            if exc.errno != errno.EADDRINUSE or attempt == tries - 1:
                raise
            continue
        sockets.own_context = True  # closing the sockets ends this context too
        return sockets
    raise AssertionError("unreachable")


def run_sim_robot(
    *,
    name: str,
    fleet: str,
    key: str,
    fleet_key: str,
    allow: str,
    seed: int = 0,
    policy: str | None = None,
    stall_after: float | None = None,
    fail_after: float | None = None,
    ready_file: str | None = None,
    thumbnails: bool = True,
) -> int:
    from unilab.teleop.fleet.reporter import FleetReporter
    from unilab.teleop.robot_host import RobotHost

    driver = FleetSimDriver(seed=seed, cameras=("scene",) if thumbnails else ())
    driver.connect()
    sockets = bind_free_ports(key, allow)
    reporter = FleetReporter(fleet, secret_key=key, server_key=fleet_key, sender=name)
    host_ref: list[Any] = []
    host = RobotHost(
        driver,
        sockets,
        name=name,
        autopilot=make_autopilot(driver, host_ref, policy),
        fleet=reporter,
    )
    host_ref.append(host)

    def jam(*_: Any) -> None:
        driver.jammed = True

    def fail(*_: Any) -> None:
        driver.failing = True

    signal.signal(signal.SIGUSR1, jam)
    signal.signal(signal.SIGUSR2, fail)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: host.request_stop())
    if stall_after is not None:
        driver.stall_at = time.monotonic() + stall_after
    if fail_after is not None:
        driver.fail_at = time.monotonic() + fail_after
    if ready_file:
        with open(ready_file, "w") as fh:
            fh.write(sockets.command_endpoint + "\n")
    try:
        host.run()
    finally:
        reporter.close()
        sockets.close()
        driver.disconnect()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m unilab.teleop.fleet.sim_robot")
    p.add_argument("--name", required=True)
    p.add_argument("--fleet", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--fleet-key", required=True)
    p.add_argument("--allow", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy", default=None)
    p.add_argument("--stall-after", type=float, default=None)
    p.add_argument("--fail-after", type=float, default=None)
    p.add_argument("--ready-file", default=None)
    p.add_argument("--no-thumbnails", action="store_true")
    a = p.parse_args(argv)
    return run_sim_robot(
        name=a.name,
        fleet=a.fleet,
        key=a.key,
        fleet_key=a.fleet_key,
        allow=a.allow,
        seed=a.seed,
        policy=a.policy,
        stall_after=a.stall_after,
        fail_after=a.fail_after,
        ready_file=a.ready_file,
        thumbnails=not a.no_thumbnails,
    )


if __name__ == "__main__":
    sys.exit(main())
