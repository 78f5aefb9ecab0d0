"""`unilab robot-host`: the process next to a robot. It owns the driver, the safety filter
and the watchdog, and speaks the HIL protocol over CurveZMQ (unilab.teleop.link).

The loop runs at the robot's control rate. Between ticks it reads commands as they come
(so the watchdog sees each one's arrival); at each tick it applies the last safe target,
reads the robot, and publishes one status message. A command becomes the target only when
it decodes against the negotiated schema, is not a replay, comes from the client holding
control while the robot runs, and passes the safety filter; anything else is counted
under its reason and changes nothing. No valid command for `watchdog_periods` control
periods while running -> safe stop (the driver holds the robot where it is) and control is
released; a client must send `resume` to move the robot again.

Needs only numpy, pyzmq, msgpack and the driver (never torch or the learner stack), so it
runs in LeRobot's environment next to LeRobot's drivers.

    unilab robot-host --robot sim:arm_reach --key keys/private/robot.key_secret \\
        --allow keys/allowed --endpoint tcp://127.0.0.1:5555
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zmq

from unilab.robots.interface import RobotDriver, StepOutcome
from unilab.teleop.link import IMAGE_PREFIX, MAX_COMMAND_BYTES, HostSockets, frames_of
from unilab.teleop.protocol import (
    BAD_HEADER,
    FRAMES,
    NO_HELLO,
    NOT_CONTROLLER,
    NOT_RUNNING,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    ArraySpec,
    Message,
    ProtocolError,
    ReplayGuard,
    SequenceCounter,
    decode,
    encode,
    schema_to_wire,
)
from unilab.teleop.safety import SafetyFilter, Watchdog

if TYPE_CHECKING:
    from unilab.teleop.fleet.reporter import FleetReporter

RUNNING, STOPPED = "running", "stopped"
SOURCES = ("policy", "human")
CONTROL_OPS = ("resume", "stop", "reset", "release", "bye")
MAX_INSTRUCTION_CHARS = 256
"""An instruction longer than this is cut (a status body stays small)."""
DRAIN_LIMIT = 256
"""Messages handled per wake-up before the loop checks its tick and watchdog again."""
AUTOPILOT = ("", "autopilot")
"""The controller identity of an on-board policy (no remote client holds control)."""
Autopilot = Callable[[dict[str, np.ndarray]], tuple[np.ndarray, float | None]]
"""Observation groups -> (action, predicted success or None), one call per tick."""


class RobotHostError(RuntimeError):
    """The robot host cannot start as asked (bad robot spec, missing driver, bad keys)."""


@dataclass
class Applied:
    seq: int = -1
    source: str = "safety"
    operator: str = ""
    answers: int = -1
    info: dict[str, Any] | None = None


class RobotHost:
    """The control loop around one connected driver and bound sockets."""

    def __init__(
        self,
        driver: RobotDriver,
        sockets: HostSockets,
        *,
        name: str | None = None,
        watchdog_periods: int = 3,
        camera_every: int = 0,
        autopilot: Autopilot | None = None,
        fleet: FleetReporter | None = None,
    ) -> None:
        self.driver = driver
        self.sockets = sockets
        self.name = name or driver.name.replace(":", "-").replace("/", "_")[:64]
        self.period = float(driver.control_dt)
        low, high = driver.joint_limits
        self.filter = SafetyFilter(low, high, driver.max_step)
        self.watchdog = Watchdog(self.period, watchdog_periods)
        self.camera_every = int(camera_every)
        self.session = uuid.uuid4().hex[:12]
        self.guard = ReplayGuard()
        self.reply_seq = SequenceCounter()
        self.status_seq = SequenceCounter()
        self.mode = STOPPED
        self.stop_reason = "startup"
        self.stopped_at = time.monotonic()
        self.controller: tuple[str, str] | None = None
        self.controller_operator = ""
        self.greeted: set[tuple[str, str]] = set()
        self.applied = Applied()
        self._new_command = False
        self._just_reset = False
        self.tick = 0
        self.episode = 0
        self.episode_step = 0
        self.received = 0
        self.accepted = 0
        self.rejects: Counter[str] = Counter()
        self.watchdog_stops = 0
        self.late_ticks = 0
        self.camera_seq = 0
        self.last_reject = ""
        self._stop_requested = False
        self._obs: dict[str, np.ndarray] = driver.observe()
        self.schema = self._schema()
        self.filter.reseat(driver.hold_action())
        self.autopilot = autopilot
        self.fleet = fleet
        self.predicted_success: float | None = None
        self.autopilot_rejects = 0
        if autopilot is not None:  # an on-board policy drives from the start
            self.controller = AUTOPILOT
            self.controller_operator = "autopilot"
            self.mode = RUNNING
            self.stop_reason = ""

    # ------------------------------------------------------------------ schema
    def _schema(self) -> dict[str, dict[str, ArraySpec]]:
        n = self.filter.action_dim
        status = {f"obs/{g}": ArraySpec("float32", v.shape) for g, v in self._obs.items()}
        status["action"] = ArraySpec("float32", (n,))
        status["target"] = ArraySpec("float32", (n,))
        for cam, spec in self.driver.cameras.items():
            status[f"{IMAGE_PREFIX}{cam}"] = ArraySpec("uint8", spec.shape)
        return {"command": {"action": ArraySpec("float32", (n,))}, "status": status}

    def describe(self) -> dict[str, Any]:
        low, high = self.filter.low, self.filter.high
        return {
            "name": self.name,
            "driver": self.driver.name,
            "control_dt": self.period,
            "action_names": list(self.driver.action_names),
            "action_low": low.tolist(),
            "action_high": high.tolist(),
            "max_step": self.filter.max_step.tolist(),
            "obs_dims": {g: int(v.shape[0]) for g, v in self._obs.items()},
            "cameras": {c: list(s.shape) for c, s in self.driver.cameras.items()},
            "watchdog_s": self.watchdog.timeout_s,
        }

    # ------------------------------------------------------------------ replies
    def _reply(self, ident: Any, mtype: str, body: dict[str, Any]) -> None:
        msg = Message(mtype, self.name, self.reply_seq.next(), body, {}, time.time())
        # A client that does not read its replies loses them.
        with contextlib.suppress(zmq.Again):
            self.sockets.command.send_multipart([ident, *encode(msg)], flags=zmq.NOBLOCK)

    # ------------------------------------------------------------------ messages
    def _reject(self, reason: str, detail: str) -> None:
        self.rejects[reason] += 1
        self.last_reject = f"{reason}: {detail}"[:200]

    def _handle(self, parts: list[Any], now: float) -> None:
        self.received += 1
        if len(parts) < 2:
            self._reject(FRAMES, "no message after the routing frame")
            return
        ident = parts[0]
        try:
            user_id = parts[1].get("User-Id") if isinstance(parts[1], zmq.Frame) else ""
        except zmq.ZMQError:
            user_id = ""
        try:
            msg = decode(
                frames_of(parts[1:]),
                schema=self.schema,
                max_message_bytes=MAX_COMMAND_BYTES,
                types=("hello", "control", "command"),
            )
            msg.user_id = str(user_id or "")
            self.guard.check(msg)
            if msg.type == "hello":
                self._hello(ident, msg)
            elif msg.type == "control":
                self._control(ident, msg)
            else:
                self._command(msg, now)
        except ProtocolError as exc:
            self._reject(exc.reason, exc.detail)
            if exc.reason in ("version",):
                self._reply(ident, "error", {"reason": exc.reason, "detail": exc.detail})

    def _hello(self, ident: Any, msg: Message) -> None:
        versions = msg.body.get("versions", [PROTOCOL_VERSION])
        common = [v for v in SUPPORTED_VERSIONS if isinstance(versions, list) and v in versions]
        if not common:
            self._reply(
                ident,
                "error",
                {"reason": "version", "detail": f"host speaks {list(SUPPORTED_VERSIONS)}"},
            )
            raise ProtocolError("version", f"client offers {versions}")
        self.greeted.add((msg.user_id, msg.sender))
        self._reply(
            ident,
            "welcome",
            {
                "robot": self.describe(),
                "schema": schema_to_wire(self.schema),
                "session": self.session,
                "version": max(common),
            },
        )

    def _control(self, ident: Any, msg: Message) -> None:
        who = (msg.user_id, msg.sender)
        if who not in self.greeted:
            raise ProtocolError(NO_HELLO, "say hello before control")
        op = msg.body.get("op")
        if op not in CONTROL_OPS:
            self._reply(
                ident,
                "ack",
                {
                    "op": str(op)[:32],
                    "ok": False,
                    "detail": f"op must be one of {list(CONTROL_OPS)}",
                },
            )
            return
        ok, detail = True, ""
        if op == "stop":  # anyone authenticated may stop the robot
            self.safe_stop("stop requested by " + msg.sender, release=False)
        elif op == "resume":
            if self.controller not in (None, who):
                ok, detail = False, f"robot is controlled by {self.controller[1]}"
                if self.controller == AUTOPILOT:
                    detail += ": ask the fleet operator for a takeover"
            else:
                self.controller = who
                self.controller_operator = str(msg.body.get("operator", msg.sender))[:64]
                self.filter.reseat(self.driver.hold_action())
                self.mode = RUNNING
                self.stop_reason = ""
                self.watchdog.feed(time.monotonic())
        elif self.controller != who:
            ok, detail = False, "only the client in control may do this"
        elif op == "reset":
            self._reset()
        elif op in ("release", "bye"):
            self.safe_stop(f"released by {msg.sender}", release=True)
        self._reply(
            ident,
            "ack",
            {"op": op, "ok": ok, "detail": detail, "tick": self.tick, "episode": self.episode},
        )

    def _command(self, msg: Message, now: float) -> None:
        if self.controller != (msg.user_id, msg.sender):
            raise ProtocolError(NOT_CONTROLLER, f"{msg.sender} does not hold control")
        if self.mode != RUNNING:
            raise ProtocolError(NOT_RUNNING, "the robot is stopped; send resume first")
        source = msg.body.get("source")
        if source not in SOURCES:
            raise ProtocolError(BAD_HEADER, f"command source must be one of {SOURCES}")
        self.filter.check(msg.arrays["action"])  # raises with the reason
        self.accepted += 1
        self.watchdog.feed(now)
        answers = msg.body.get("answers", -1)
        info = msg.body.get("info")
        self.applied = Applied(
            seq=msg.seq,
            source=source,
            operator=str(msg.body.get("operator", ""))[:64],
            answers=answers if isinstance(answers, int) else -1,
            info=info if isinstance(info, dict) else None,
        )
        self._new_command = True

    def _reset(self) -> None:
        self._obs = self.driver.reset()
        self.filter.reseat(self.driver.hold_action())
        self.episode += 1
        self.episode_step = 0
        self._just_reset = True  # the next status shows the reset state, unstepped
        self.applied = Applied()
        if self.mode == RUNNING:
            self.watchdog.feed(time.monotonic())

    # ------------------------------------------------------------------ fleet
    def fleet_op(self, op: str, operator: str) -> tuple[bool, str]:
        """A floor operator's command from the fleet server: (done, why not)."""
        now = time.monotonic()
        human = self.controller not in (None, AUTOPILOT)
        if op == "pause":
            self.safe_stop(f"paused by {operator}", release=False)
        elif op == "reset":
            self._reset()
        elif op == "resume":
            if human:
                assert self.controller is not None
                return False, f"a teleoperator ({self.controller[1]}) holds control"
            if self.autopilot is None:
                return False, "no on-board policy: a station must take control"
            self.controller = AUTOPILOT
            self.controller_operator = "autopilot"
            self.filter.reseat(self.driver.hold_action())
            self.mode = RUNNING
            self.stop_reason = ""
        elif op == "takeover":
            if human:
                assert self.controller is not None
                return True, f"{self.controller[1]} already holds control"
            # Release the robot so a station's `resume` gets control.
            self.safe_stop(f"takeover requested by {operator}", release=True)
        else:
            return False, f"op must be one of takeover, pause, reset, resume (got {op[:32]!r})"
        if self.fleet is not None and op in ("reset", "resume"):
            self.fleet.mark_moved(now)
        return True, ""

    def fleet_status(self, now: float) -> dict[str, Any]:
        """The fleet server's view of this robot (a few hundred bytes)."""
        controller = ""
        if self.controller == AUTOPILOT:
            controller = "autopilot"
        elif self.controller is not None:
            controller = self.controller_operator or self.controller[1]
        success = self.predicted_success
        info = self.applied.info or {}
        if self.controller not in (None, AUTOPILOT) and isinstance(
            info.get("predicted_success"), int | float
        ):
            success = float(info["predicted_success"])  # the station's policy says so
        limit = getattr(self.driver, "episode_steps", None)
        progress = None
        if isinstance(limit, int) and limit > 0:
            progress = min(1.0, self.episode_step / limit)
        error = ""
        if self.stop_reason.startswith("watchdog"):
            error = self.stop_reason
        camera_error = getattr(self.driver, "camera_error", "")
        if isinstance(camera_error, str) and camera_error:
            error = f"camera: {camera_error}"
        return {
            "robot": self.name,
            "driver": self.driver.name,
            "task": self._instruction() or self.driver.name,
            "endpoint": self.sockets.command_endpoint,
            "mode": self.mode,
            "stop_reason": self.stop_reason,
            "controller": controller,
            "episode": self.episode,
            "episode_step": self.episode_step,
            "progress": progress,
            "predicted_success": None if success is None else min(1.0, max(0.0, success)),
            "error": error[:120],
            "tick": self.tick,
            "host_time": time.time(),
            "rejects": sum(self.rejects.values()) + self.autopilot_rejects,
        }

    def _autopilot_step(self, now: float) -> None:
        """The on-board policy's command for this tick, shaped to the safety limits (as a
        station shapes its commands) and then through the same filter."""
        assert self.autopilot is not None
        action, success = self.autopilot(self._obs)
        f = self.filter
        step = f.max_step * np.float32(0.999)  # stay clear of float32 rounding at the edge
        cmd = np.clip(np.asarray(action, dtype=np.float32), f.low, f.high)
        cmd = np.clip(cmd, f.target - step, f.target + step).astype(np.float32)
        try:
            f.check(cmd)
        except ProtocolError:
            self.autopilot_rejects += 1
            return
        self.predicted_success = success
        self.applied = Applied(seq=self.tick, source="policy", operator="autopilot")
        self._new_command = True

    # ------------------------------------------------------------------ safety
    def safe_stop(self, reason: str, *, release: bool) -> None:
        hold = self.driver.safe_stop()
        self.filter.reseat(hold)
        if self.mode == RUNNING or release:
            self.stopped_at = time.monotonic()
        self.mode = STOPPED
        self.stop_reason = reason
        self.watchdog.disarm()
        self.applied = Applied()
        if release:
            self.controller = None
            self.controller_operator = ""

    # ------------------------------------------------------------------ the loop
    def _tick(self, now: float) -> None:
        if self.autopilot is not None and self.mode == RUNNING and self.controller == AUTOPILOT:
            self._autopilot_step(now)
        held = not self._new_command
        self._new_command = False
        target = self.filter.target.copy()
        if self._just_reset:  # publish the first state of the episode before moving
            self._just_reset = False
            outcome = StepOutcome()
            held = True
        else:
            self.driver.act(target)
            outcome = self.driver.outcome()
            self.episode_step += 1
        self._obs = self.driver.observe()
        ended = outcome.terminated or outcome.truncated
        applied = self.applied if self.mode == RUNNING else Applied()
        body: dict[str, Any] = {
            "robot": self.name,
            "session": self.session,
            "tick": self.tick,
            "host_time": now,
            "mode": self.mode,
            "stop_reason": self.stop_reason,
            "stopped_at": self.stopped_at,
            "controller": None
            if self.controller is None
            else {"sender": self.controller[1], "operator": self.controller_operator},
            "applied": {
                "seq": applied.seq,
                "source": applied.source,
                "operator": applied.operator,
                "answers": applied.answers,
                "held": held,
            },
            "controller_info": applied.info or {},
            "reward": float(outcome.reward) if math.isfinite(outcome.reward) else 0.0,
            "terminated": bool(outcome.terminated),
            "truncated": bool(outcome.truncated),
            "episode": self.episode,
            "episode_step": self.episode_step,
            "instruction": self._instruction(),
            "received": self.received,
            "accepted": self.accepted,
            "rejects": dict(self.rejects),
            "last_reject": self.last_reject,
            "watchdog_stops": self.watchdog_stops,
            "late_ticks": self.late_ticks,
            "camera_seq": self.camera_seq,
        }
        arrays: dict[str, np.ndarray] = {f"obs/{g}": v for g, v in self._obs.items()}
        arrays["action"] = target
        if ended:  # the simulated task reset itself: the next command starts from home
            self.episode += 1
            self.episode_step = 0
            self.filter.reseat(self.driver.hold_action())
            self.applied = Applied()  # until a new command, the robot holds for safety
        arrays["target"] = self.filter.target
        if self.camera_every and self.tick % self.camera_every == 0:
            frames = self.driver.read_cameras()
            if frames:
                self.camera_seq += 1
                body["camera_seq"] = self.camera_seq
                for cam, img in frames.items():
                    arrays[f"{IMAGE_PREFIX}{cam}"] = img
        msg = Message("status", self.name, self.status_seq.next(), body, arrays, time.time())
        with contextlib.suppress(zmq.Again):
            self.sockets.status.send_multipart(encode(msg), flags=zmq.NOBLOCK, copy=False)
        if self.fleet is not None:
            self.fleet.on_tick(self, now)
        self.tick += 1

    def _instruction(self) -> str | None:
        text = self.driver.instruction
        return None if text is None else str(text)[:MAX_INSTRUCTION_CHARS]

    def request_stop(self) -> None:
        self._stop_requested = True

    def run(self, *, max_ticks: int | None = None, duration_s: float | None = None) -> None:
        """Run until `request_stop()`, SIGINT/SIGTERM (via main), `max_ticks` or `duration_s`."""
        sock = self.sockets.command
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        start = time.monotonic()
        next_tick = start
        end = None if duration_s is None else start + duration_s
        try:
            while not self._stop_requested:
                now = time.monotonic()
                if end is not None and now >= end:
                    break
                if max_ticks is not None and self.tick >= max_ticks:
                    break
                deadline = next_tick
                # An on-board policy runs inside this loop and cannot fall silent on its
                # own: the watchdog guards remote controllers only.
                remote = self.mode == RUNNING and self.controller != AUTOPILOT
                wd = self.watchdog.deadline() if remote else None
                if wd is not None:
                    deadline = min(deadline, wd)
                # Always look at the socket, even when a tick is overdue: commands that
                # arrived while this process was descheduled must reach the watchdog first.
                wait_ms = max(0, math.ceil((deadline - now) * 1e3))
                if poller.poll(wait_ms):
                    for _ in range(DRAIN_LIMIT):
                        try:
                            parts = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        self._handle(parts, time.monotonic())
                now = time.monotonic()
                remote = self.mode == RUNNING and self.controller != AUTOPILOT
                if remote and self.watchdog.expired(now):
                    self.watchdog_stops += 1
                    self.safe_stop(
                        f"watchdog: no valid command for {self.watchdog.timeout_s * 1e3:.0f} ms",
                        release=True,
                    )
                if now >= next_tick:
                    if now - next_tick > self.period:
                        self.late_ticks += 1
                        next_tick = now  # restart the schedule rather than rushing
                    self._tick(now)
                    next_tick += self.period
        finally:
            if self.mode == RUNNING:
                self.safe_stop("robot host shutting down", release=True)


def main(argv: list[str] | None = None) -> int:
    """`unilab robot-host` (and `python -m unilab.teleop.robot_host`): see robot_host_cli."""
    from unilab.teleop.robot_host_cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
