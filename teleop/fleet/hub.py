"""The fleet server's end of the link: one CURVE ROUTER that robot hosts dial.

Hosts are the clients here (they know where the fleet server is; it need not know where
they are), with the HIL protocol and its checks unchanged: every message is decoded by
`protocol.decode` against `FLEET_SCHEMA`, replay-checked per (authenticated key, sender),
and a status counts only from a host that said hello on this connection. An unknown
sender's status gets one `error {reason: no_hello}` a second, and the host greets again
(it does after a fleet server restart).

One thread owns the socket: it receives, sends the operator's queued commands, and runs
the lost-robot clock (`FleetState.check`) at every wake-up, at least 50 times a second.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from unilab.teleop.fleet.events import EventLog
from unilab.teleop.fleet.state import FleetState
from unilab.teleop.fleet.wire import (
    FLEET_SCHEMA,
    MAX_FLEET_BYTES,
    STATUS_HZ,
    THUMB,
    THUMB_FPS,
    unpack_thumb,
)
from unilab.teleop.keys import check_allowlist, load_secret
from unilab.teleop.link import frames_of
from unilab.teleop.protocol import (
    NO_HELLO,
    SUPPORTED_VERSIONS,
    Message,
    ProtocolError,
    ReplayGuard,
    SequenceCounter,
    decode,
    encode,
    schema_to_wire,
)

WAKE_S = 0.02
MAX_ROBOTS_PER_KEY = 256
"""Simulated fleets share one key among many robots (each robot is a sender name)."""


class FleetHub:
    def __init__(
        self,
        state: FleetState,
        *,
        secret_key: str | os.PathLike[str],
        allow_dir: str | os.PathLike[str],
        endpoint: str = "tcp://127.0.0.1:7100",
        events: EventLog | None = None,
        status_hz: float = STATUS_HZ,
        thumb_fps: float = THUMB_FPS,
    ) -> None:
        public, secret = load_secret(secret_key)
        check_allowlist(allow_dir)
        self.state = state
        self.events = events
        self.status_hz = float(status_hz)
        self.thumb_fps = float(thumb_fps)
        self.name = "fleet"
        self.context: zmq.Context[Any] = zmq.Context()
        self.auth = ThreadAuthenticator(self.context)
        self.auth.start()
        self.auth.configure_curve(domain="*", location=str(Path(allow_dir)))
        self.sock = self.context.socket(zmq.ROUTER)
        self.sock.curve_secretkey = secret
        self.sock.curve_publickey = public
        self.sock.curve_server = True
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_FLEET_BYTES)
        self.sock.setsockopt(zmq.RCVHWM, 2000)
        try:
            self.sock.bind(endpoint)
        except zmq.ZMQError:
            self.sock.close(0)
            self.auth.stop()
            self.context.term()
            raise
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.guard = ReplayGuard(max_senders=MAX_ROBOTS_PER_KEY)
        self.seq = SequenceCounter()
        self.idents: dict[str, bytes] = {}
        """Robot name -> routing id of the connection that said hello."""
        self.greeted: set[tuple[str, str]] = set()
        self.rejects: Counter[str] = Counter()
        self.received = 0
        self._nagged: dict[str, float] = {}
        self._outbox: queue.SimpleQueue[tuple[str, dict[str, Any]]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-hub", daemon=True)

    def start(self) -> FleetHub:
        self._thread.start()
        return self

    def send_control(self, robot: str, op: str, operator: str, request: int) -> bool:
        """Queue an operator command for `robot`'s host (sent by the hub thread)."""
        if robot not in self.idents:
            return False
        self._outbox.put((robot, {"op": op, "operator": operator, "request": int(request)}))
        return True

    # ------------------------------------------------------------------ the thread
    def _send(self, ident: bytes, mtype: str, body: dict[str, Any]) -> None:
        msg = Message(mtype, self.name, self.seq.next(), body, {}, time.time())
        with contextlib.suppress(zmq.Again):  # a host that stopped reading loses the reply
            self.sock.send_multipart([ident, *encode(msg)], flags=zmq.NOBLOCK)

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self._stop.is_set():
            if poller.poll(int(WAKE_S * 1e3)):
                for _ in range(512):
                    try:
                        parts = self.sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._handle(parts)
            while True:
                try:
                    robot, body = self._outbox.get_nowait()
                except queue.Empty:
                    break
                ident = self.idents.get(robot)
                if ident is not None:
                    self._send(ident, "control", body)
            self.state.check(time.monotonic())

    def _handle(self, parts: list[Any]) -> None:
        self.received += 1
        if len(parts) < 2:
            self.rejects["frames"] += 1
            return
        ident = bytes(parts[0].bytes)
        try:
            user_id = parts[1].get("User-Id")
        except zmq.ZMQError:
            user_id = ""
        try:
            msg = decode(
                frames_of(parts[1:]),
                schema=FLEET_SCHEMA,
                max_message_bytes=MAX_FLEET_BYTES,
                types=("hello", "status", "ack"),
                optional_prefixes=("images/",),
            )
            msg.user_id = str(user_id or "")
            who = (msg.user_id, msg.sender)
            if msg.type != "hello" and who not in self.greeted:
                self._nag(ident, msg.sender)
                raise ProtocolError(NO_HELLO, f"{msg.sender} sent {msg.type} before hello")
            self.guard.check(msg)
        except ProtocolError as exc:
            self.rejects[exc.reason] += 1
            return
        if msg.type == "hello":
            self._hello(ident, msg)
        elif msg.type == "status":
            thumb = None
            if THUMB in msg.arrays:
                thumb = unpack_thumb(msg.arrays[THUMB], msg.body.get("thumb_len"))
            self.state.update(
                msg.sender, msg.body, time.monotonic(), thumb=thumb, sent_time=msg.time
            )
        elif self.events is not None:  # ack of an operator command
            body = msg.body
            self.events.append(
                "ack",
                robot=msg.sender,
                op=str(body.get("op", ""))[:32],
                ok=bool(body.get("ok")),
                detail=str(body.get("detail", ""))[:200],
                request=body.get("request"),
            )

    def _nag(self, ident: bytes, sender: str) -> None:
        now = time.monotonic()
        if len(self._nagged) > 4 * MAX_ROBOTS_PER_KEY:  # bounded, whatever names arrive
            self._nagged.clear()
        if now - self._nagged.get(sender, -1e9) >= 1.0:
            self._nagged[sender] = now
            self._send(ident, "error", {"reason": NO_HELLO, "detail": "say hello first"})

    def _hello(self, ident: bytes, msg: Message) -> None:
        versions = msg.body.get("versions")
        if not (isinstance(versions, list) and any(v in SUPPORTED_VERSIONS for v in versions)):
            self.rejects["version"] += 1
            self._send(ident, "error", {"reason": "version", "detail": "no common version"})
            return
        self.greeted.add((msg.user_id, msg.sender))
        rejoin = msg.sender in self.idents
        self.idents[msg.sender] = ident
        if self.events is not None:
            self.events.append("hello", robot=msg.sender, rejoin=rejoin)
        self._send(
            ident,
            "welcome",
            {
                "schema": schema_to_wire(FLEET_SCHEMA),
                "status_hz": self.status_hz,
                "thumb_fps": self.thumb_fps,
                "version": max(SUPPORTED_VERSIONS),
            },
        )

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.sock.close(0)
        self.auth.stop()
        self.context.term()
