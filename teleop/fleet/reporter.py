"""A robot host's end of the fleet link (`unilab robot-host --fleet tcp://...`).

The host dials the fleet server with its own key pair (its public key sits in the fleet
server's allowlist) and the server's public key. Once per control tick the host calls
`on_tick`: it runs the operator commands that arrived (takeover, pause, reset, resume:
`RobotHost.fleet_op`) and, at the rate the welcome asked for (10 Hz), sends one fleet
status; a camera frame goes along as a JPEG at `thumb_fps` (2 fps).

`idle_s` is the time since the robot's observation last changed by more than
`motion_tol` between two reports: what the stall alert reads.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import zmq

from unilab.teleop.fleet.wire import (
    MAX_FLEET_BYTES,
    ROBOT_ROLE,
    STATUS_HZ,
    THUMB,
    THUMB_FPS,
    encode_jpeg,
    pack_thumb,
)
from unilab.teleop.keys import load_public, load_secret
from unilab.teleop.link import frames_of
from unilab.teleop.protocol import (
    SUPPORTED_VERSIONS,
    Message,
    ProtocolError,
    ReplayGuard,
    SequenceCounter,
    decode,
    encode,
)

if TYPE_CHECKING:
    from unilab.teleop.robot_host import RobotHost

HELLO_RETRY_S = 1.0


def _next_due(due: float, period: float, now: float) -> float:
    """The next send time on a fixed grid, so the rate holds at 10 Hz although control
    ticks (50 Hz, with jitter) rarely land on it; after a long stall it starts afresh."""
    due += period
    return due if due > now - period else now + period


class FleetReporter:
    def __init__(
        self,
        endpoint: str,
        *,
        secret_key: str | os.PathLike[str],
        server_key: str | os.PathLike[str],
        sender: str,
        motion_tol: float = 1e-4,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        public, secret = load_secret(secret_key)
        self.endpoint = endpoint
        self.sender = sender
        self.motion_tol = float(motion_tol)
        self.context = context or zmq.Context.instance()
        self.sock = self.context.socket(zmq.DEALER)
        self.sock.curve_secretkey = secret
        self.sock.curve_publickey = public
        self.sock.curve_serverkey = load_public(server_key)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_FLEET_BYTES)
        # Status is for watching: while the server is away, old reports are dropped.
        self.sock.setsockopt(zmq.SNDHWM, 20)
        self.sock.connect(endpoint)
        self.seq = SequenceCounter()
        self.guard = ReplayGuard()
        self.welcomed = False
        self.status_period = 1.0 / STATUS_HZ
        self.thumb_period = 1.0 / THUMB_FPS
        self._hello_at = -1e9
        self._status_due = -1e9
        self._thumb_due = -1e9
        self._motion_ref: np.ndarray | None = None
        self._moved_at = time.monotonic()
        self.sent = 0
        self.thumbs = 0
        self.commands = 0
        self.rejects: dict[str, int] = {}

    def _send(self, mtype: str, body: dict[str, Any], arrays: dict[str, Any] | None = None) -> None:
        msg = Message(mtype, self.sender, self.seq.next(), body, dict(arrays or {}), time.time())
        with contextlib.suppress(zmq.Again):
            self.sock.send_multipart(encode(msg), flags=zmq.NOBLOCK, copy=False)

    def _hello(self, host: RobotHost, now: float) -> None:
        self._hello_at = now
        d = host.describe()
        self._send(
            "hello",
            {
                "role": ROBOT_ROLE,
                "versions": list(SUPPORTED_VERSIONS),
                "robot": {"name": d["name"], "driver": d["driver"], "control_dt": d["control_dt"]},
            },
        )

    # ------------------------------------------------------------------ per tick
    def on_tick(self, host: RobotHost, now: float) -> None:
        self._receive(host)
        if not self.welcomed:
            if now - self._hello_at >= HELLO_RETRY_S:
                self._hello(host, now)
            return
        self._track_motion(host, now)
        if now >= self._status_due:
            self._status_due = _next_due(self._status_due, self.status_period, now)
            self._report(host, now)

    def _receive(self, host: RobotHost) -> None:
        for _ in range(64):
            try:
                parts = self.sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                msg = decode(
                    frames_of(parts),
                    max_message_bytes=MAX_FLEET_BYTES,
                    types=("welcome", "control", "error"),
                )
                self.guard.check(msg)
            except ProtocolError as exc:
                self.rejects[exc.reason] = self.rejects.get(exc.reason, 0) + 1
                continue
            if msg.type == "welcome":
                self.welcomed = True
                hz, fps = msg.body.get("status_hz"), msg.body.get("thumb_fps")
                if isinstance(hz, int | float) and 0 < hz <= 100:
                    self.status_period = 1.0 / float(hz)
                if isinstance(fps, int | float) and 0 <= fps <= 30:
                    self.thumb_period = 1.0 / float(fps) if fps > 0 else float("inf")
            elif msg.type == "error":
                if msg.body.get("reason") == "no_hello":
                    self.welcomed = False  # the fleet server restarted: greet it again
                    self._hello_at = -1e9
            else:
                self.commands += 1
                op = str(msg.body.get("op", ""))[:32]
                operator = str(msg.body.get("operator", msg.sender))[:64]
                ok, detail = host.fleet_op(op, operator)
                self._send(
                    "ack",
                    {
                        "op": op,
                        "ok": ok,
                        "detail": detail,
                        "request": msg.body.get("request", -1),
                        "episode": host.episode,
                    },
                )

    def _track_motion(self, host: RobotHost, now: float) -> None:
        groups = [np.asarray(v, dtype=np.float32).reshape(-1) for v in host._obs.values()]
        state = np.concatenate(groups) if groups else np.zeros(0, np.float32)
        ref = self._motion_ref
        if (
            ref is None
            or ref.shape != state.shape
            or np.max(np.abs(state - ref), initial=0.0) > self.motion_tol
        ):
            self._motion_ref = state.copy()
            self._moved_at = now

    def mark_moved(self, now: float) -> None:
        """A reset or resume starts the idle clock again."""
        self._moved_at = now
        self._motion_ref = None

    def _report(self, host: RobotHost, now: float) -> None:
        body = host.fleet_status(now)
        body["idle_s"] = max(0.0, now - self._moved_at) if host.mode == "running" else 0.0
        arrays: dict[str, np.ndarray] = {}
        if now >= self._thumb_due and host.driver.cameras:
            self._thumb_due = _next_due(self._thumb_due, self.thumb_period, now)
            frames = host.driver.read_cameras()
            image = next(iter(frames.values()), None) if frames else None
            jpeg = encode_jpeg(image) if image is not None else None
            packed = pack_thumb(jpeg) if jpeg else None
            if packed is not None and jpeg is not None:
                arrays[THUMB] = packed
                body["thumb_len"] = len(jpeg)
                self.thumbs += 1
        self._send("status", body, arrays)
        self.sent += 1

    def close(self) -> None:
        self.sock.close(0)
