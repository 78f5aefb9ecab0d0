"""The authenticated link: CurveZMQ sockets for a robot host and its clients.

A robot host binds two sockets, both CURVE servers behind one `ThreadAuthenticator` whose
allowlist is a directory of client public keys:

    command  ROUTER  clients' hello / control / command in; welcome / ack / error out
    status   PUB     one status message per control tick (state, cameras, who controls)

A client (the operator station, a fleet server, a monitor) holds its own key pair and the
host's public key, opens a DEALER to the command endpoint and says hello; the welcome
carries the negotiated schema, after which it may subscribe to the status stream
(`StatusSubscriber`, usable on its own by a fleet server).

Every socket sets `zmq.MAXMSGSIZE` (a larger inbound frame disconnects the peer inside
libzmq) and small high-water marks. Messages are only ever built by `protocol.encode`
and read by `protocol.decode`: bytes in, checked arrays out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from unilab.teleop.keys import check_allowlist, load_public, load_secret
from unilab.teleop.protocol import (
    MAX_HEADER_BYTES,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Message,
    ProtocolError,
    ReplayGuard,
    Schema,
    SequenceCounter,
    decode,
    encode,
    schema_bytes,
    schema_from_wire,
)

MAX_COMMAND_BYTES = 64 * 1024
"""Inbound limit on the host's command socket (commands are a few hundred bytes)."""
IMAGE_PREFIX = "images/"


class LinkError(RuntimeError):
    """The robot host did not answer, refused us, or spoke another protocol."""


def status_endpoint(command_endpoint: str) -> str:
    """The status endpoint next to a command endpoint: same host, port + 1."""
    head, sep, port = command_endpoint.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"endpoint {command_endpoint!r} must look like tcp://HOST:PORT")
    return f"{head}:{int(port) + 1}"


def frames_of(parts: Sequence[Any]) -> list[memoryview]:
    """Zero-copy views of received frames (zmq.Frame or bytes)."""
    return [p.buffer if isinstance(p, zmq.Frame) else memoryview(p) for p in parts]


def _bind_pair(router: zmq.Socket[Any], pub: zmq.Socket[Any], endpoint: str) -> str:
    """Bind command at `endpoint` and status at its port + 1; the status endpoint.

    With an ephemeral port (`:0`, tests and `unilab hil` defaults) the OS picks the command
    port and port + 1 may already be taken by another process: try other ports then.
    """
    ephemeral = endpoint.endswith(":0") or endpoint.endswith(":*")
    for _ in range(50 if ephemeral else 1):
        router.bind(endpoint)
        bound = router.getsockopt_string(zmq.LAST_ENDPOINT)
        status = status_endpoint(bound)
        try:
            pub.bind(status)
            return status
        except zmq.ZMQError as err:
            router.unbind(bound)
            if not ephemeral or err.errno != zmq.EADDRINUSE:
                raise
    raise zmq.ZMQError(zmq.EADDRINUSE, f"no free port pair (command, command + 1) for {endpoint}")


def _curve_server(sock: zmq.Socket[Any], public: bytes, secret: bytes) -> None:
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True


def _curve_client(sock: zmq.Socket[Any], public: bytes, secret: bytes, server: bytes) -> None:
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server


@dataclass
class HostSockets:
    """The robot host's side: authenticator, ROUTER and PUB, bound."""

    context: zmq.Context[Any]
    authenticator: ThreadAuthenticator
    command: zmq.Socket[Any]
    status: zmq.Socket[Any]
    command_endpoint: str
    status_endpoint: str
    own_context: bool = False

    @classmethod
    def bind(
        cls,
        *,
        secret_key: str | os.PathLike[str],
        allow_dir: str | os.PathLike[str],
        endpoint: str,
        max_command_bytes: int = MAX_COMMAND_BYTES,
        context: zmq.Context[Any] | None = None,
    ) -> HostSockets:
        public, secret = load_secret(secret_key)
        check_allowlist(allow_dir)
        ctx = context or zmq.Context()
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=str(Path(allow_dir)))
        router = ctx.socket(zmq.ROUTER)
        pub = ctx.socket(zmq.PUB)
        try:
            for sock in (router, pub):
                _curve_server(sock, public, secret)
                sock.setsockopt(zmq.LINGER, 0)
            router.setsockopt(zmq.MAXMSGSIZE, max_command_bytes)
            router.setsockopt(zmq.RCVHWM, 1000)
            # Status is for watching: a slow subscriber loses old ticks, never delays new ones.
            pub.setsockopt(zmq.MAXMSGSIZE, 1024)  # subscribers send only (un)subscribe frames
            pub.setsockopt(zmq.SNDHWM, 100)
            status = _bind_pair(router, pub, endpoint)
        except Exception:
            router.close(0)
            pub.close(0)
            auth.stop()
            raise
        return cls(
            ctx,
            auth,
            router,
            pub,
            router.getsockopt_string(zmq.LAST_ENDPOINT),
            status,
            own_context=context is None,
        )

    def reload_allowlist(self, allow_dir: str | os.PathLike[str]) -> None:
        """Re-read the allowlist (after adding or removing a client key)."""
        check_allowlist(allow_dir)
        self.authenticator.configure_curve(domain="*", location=str(Path(allow_dir)))

    def close(self) -> None:
        self.command.close(0)
        self.status.close(0)
        self.authenticator.stop()
        if self.own_context:
            self.context.term()


class StatusSubscriber:
    """A CURVE SUB on a robot host's status stream; decodes and replay-checks each tick.
    A fleet server uses one per robot host (the schema comes from a hello/welcome)."""

    def __init__(
        self,
        context: zmq.Context[Any],
        endpoint: str,
        *,
        public: bytes,
        secret: bytes,
        server_public: bytes,
        schema: Schema,
    ) -> None:
        self.schema = schema
        self.sock = context.socket(zmq.SUB)
        _curve_client(self.sock, public, secret, server_public)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.max_bytes = schema_bytes(schema, "status") + MAX_HEADER_BYTES
        self.sock.setsockopt(zmq.MAXMSGSIZE, self.max_bytes)
        self.sock.setsockopt(zmq.RCVHWM, 200)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)
        self.guard = ReplayGuard()
        self.rejects: dict[str, int] = {}

    def recv(self, timeout_s: float | None) -> Message | None:
        """The next valid status, or None after `timeout_s` (None: wait forever)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1e3))
            if not self.sock.poll(wait, zmq.POLLIN):
                return None
            msg = self.recv_ready()
            if msg is not None:
                return msg
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def recv_ready(self) -> Message | None:
        """One status already waiting (call after a poll said so); None if it was bad."""
        parts = self.sock.recv_multipart(copy=False)
        try:
            msg = decode(
                frames_of(parts),
                schema=self.schema,
                max_message_bytes=self.max_bytes,
                types=("status",),
                optional_prefixes=(IMAGE_PREFIX,),
            )
            self.guard.check(msg)
        except ProtocolError as exc:
            self.rejects[exc.reason] = self.rejects.get(exc.reason, 0) + 1
            return None
        return msg

    def close(self) -> None:
        self.sock.close(0)


@dataclass
class Welcome:
    robot: dict[str, Any]
    schema: dict[str, Any]
    session: str
    version: int


class ClientLink:
    """A client of one robot host: DEALER for hello/control/command, SUB for status."""

    def __init__(
        self,
        endpoint: str,
        *,
        secret_key: str | os.PathLike[str],
        server_key: str | os.PathLike[str],
        sender: str,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        self.public, self.secret = load_secret(secret_key)
        self.server_public = load_public(server_key)
        self.endpoint = endpoint
        self.sender = sender
        self.context = context or zmq.Context.instance()
        self.sock = self.context.socket(zmq.DEALER)
        _curve_client(self.sock, self.public, self.secret, self.server_public)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_COMMAND_BYTES)
        self.sock.setsockopt(zmq.SNDHWM, 10)
        self.sock.connect(endpoint)
        self.seq = SequenceCounter()
        self.reply_guard = ReplayGuard()
        self.welcome: Welcome | None = None
        self.schema: dict[str, Any] = {}
        self.status: StatusSubscriber | None = None

    def send(self, mtype: str, body: dict[str, Any], arrays: dict[str, Any] | None = None) -> int:
        seq = self.seq.next()
        msg = Message(mtype, self.sender, seq, body, dict(arrays or {}), time.time())
        self.sock.send_multipart(encode(msg), copy=False)
        return seq

    def _reply(self, timeout_s: float) -> Message:
        if not self.sock.poll(int(timeout_s * 1e3), zmq.POLLIN):
            raise LinkError(
                f"no answer from the robot host at {self.endpoint} within {timeout_s:g} s: is it "
                "running, and is this client's public key in its allowlist (and the host's "
                "public key the one given here)?"
            )
        parts = self.sock.recv_multipart(copy=False)
        msg = decode(frames_of(parts), types=("welcome", "ack", "error"))
        self.reply_guard.check(msg)
        return msg

    def hello(self, operator: str, role: str = "operator", timeout_s: float = 5.0) -> Welcome:
        self.send(
            "hello", {"operator": operator, "role": role, "versions": list(SUPPORTED_VERSIONS)}
        )
        msg = self._reply(timeout_s)
        if msg.type != "welcome":
            raise LinkError(f"robot host refused hello: {msg.body.get('detail', msg.body)}")
        schema = schema_from_wire(msg.body.get("schema"))
        self.schema = schema
        self.welcome = Welcome(
            robot=dict(msg.body.get("robot", {})),
            schema=schema,
            session=str(msg.body.get("session", "")),
            version=msg.version,
        )
        return self.welcome

    def subscribe(self, endpoint: str | None = None) -> StatusSubscriber:
        if self.welcome is None:
            raise LinkError("say hello first: the status schema comes with the welcome")
        self.status = StatusSubscriber(
            self.context,
            endpoint or status_endpoint(self.endpoint),
            public=self.public,
            secret=self.secret,
            server_public=self.server_public,
            schema=self.schema,
        )
        return self.status

    def control(self, op: str, timeout_s: float = 5.0, **extra: Any) -> Message:
        self.send("control", {"op": op, **extra})
        msg = self._reply(timeout_s)
        if msg.type == "error":
            raise LinkError(f"robot host error on {op}: {msg.body.get('detail', '')}")
        return msg

    def command(
        self,
        action: Any,
        *,
        source: str,
        operator: str,
        answers: int,
        info: dict[str, Any] | None = None,
    ) -> int:
        body: dict[str, Any] = {"source": source, "operator": operator, "answers": int(answers)}
        if info:
            body["info"] = info
        return self.send("command", body, {"action": action})

    def close(self) -> None:
        if self.status is not None:
            self.status.close()
        self.sock.close(0)


__all__ = [
    "PROTOCOL_VERSION",
    "ClientLink",
    "HostSockets",
    "LinkError",
    "StatusSubscriber",
    "Welcome",
    "status_endpoint",
]
