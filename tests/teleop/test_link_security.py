"""Security of the robot host's link over real CurveZMQ sockets on loopback: unknown key,
no key and replayed messages deliver nothing; 10,000 fuzzed messages are all rejected,
counted per reason, while the robot holds its last safe target."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import msgpack
import numpy as np
import pytest
import zmq
from hil_fixtures import Keys, running_host

from unilab.teleop.fuzz import EXPECTED_REASON, CommandFuzzer
from unilab.teleop.keys import load_public, load_secret
from unilab.teleop.link import ClientLink, LinkError, StatusSubscriber
from unilab.teleop.protocol import Message, encode

N = 1000


def wait_until(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def _command(link: ClientLink, action: np.ndarray, seq: int | None = None) -> list[bytes]:
    msg = Message(
        "command",
        link.sender,
        link.seq.next() if seq is None else seq,
        {"source": "policy", "operator": "alice", "answers": 0},
        {"action": np.asarray(action, np.float32)},
    )
    return [bytes(f) for f in encode(msg)]


def _operator(keys: Keys, host) -> ClientLink:  # type: ignore[no-untyped-def]
    link = ClientLink(
        host.sockets.command_endpoint,
        secret_key=keys.secret("alice"),
        server_key=keys.public("robot"),
        sender="alice-station",
    )
    link.hello("alice")
    return link


def _raw_dealer(endpoint: str, keys: Keys | None, name: str = "intruder") -> zmq.Socket:  # type: ignore[type-arg]
    """A DEALER that queues up to 2*N messages (CURVE client with `name`'s key, or none)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 2 * N)
    if keys is not None:
        pub, sec = load_secret(keys.secret(name))
        sock.curve_secretkey, sock.curve_publickey = sec, pub
        sock.curve_serverkey = load_public(keys.public("robot"))
    sock.connect(endpoint)
    return sock


def test_unknown_key_and_no_key_deliver_nothing(keys: Keys) -> None:
    with running_host(keys) as host:
        endpoint = host.sockets.command_endpoint
        # A key pair the host does not list: the CURVE handshake is refused (ZAP 400).
        intruder = ClientLink(
            endpoint,
            secret_key=keys.secret("intruder"),
            server_key=keys.public("robot"),
            sender="x",
        )
        with pytest.raises(LinkError, match="allowlist"):
            intruder.hello("mallory", timeout_s=1.0)
        frames = _command(intruder, np.zeros(7))
        intruder.close()
        unknown, plain = _raw_dealer(endpoint, keys), _raw_dealer(endpoint, None)
        offered = Counter[str]()
        for label, sock in (("unknown", unknown), ("plain", plain)):  # unknown key, no key
            for i in range(N):
                try:  # libzmq drops the pipe after each refused handshake and retries
                    sock.send_multipart(frames, flags=zmq.NOBLOCK)
                    offered[label + "_queued"] += 1
                except zmq.Again:
                    offered[label + "_refused"] += 1
                if i % 100 == 0:
                    time.sleep(0.01)  # let the socket reconnect and try the handshake again
        # Neither may watch the status stream either.
        pub, sec = load_secret(keys.secret("intruder"))
        spy = StatusSubscriber(
            zmq.Context.instance(),
            host.sockets.status_endpoint,
            public=pub,
            secret=sec,
            server_public=load_public(keys.public("robot")),
            schema=host.schema,
        )
        assert spy.recv(1.5) is None
        assert host.tick > 20  # the host was publishing all along
        assert host.received == 0, f"{host.received} messages reached the host"
        assert host.accepted == 0
        spy.close()
        unknown.close(0)
        plain.close(0)


def test_replayed_messages_deliver_nothing(keys: Keys) -> None:
    with running_host(keys, watchdog_periods=1000) as host:
        link = _operator(keys, host)
        assert link.control("resume", operator="alice").body["ok"]
        target = host.filter.target.copy()
        frames = _command(link, target)
        link.sock.send_multipart(frames)
        assert wait_until(lambda: host.accepted == 1)
        received = host.received
        for _ in range(N):  # the very same bytes again
            link.sock.send_multipart(frames)
        older = link.seq.next() - 10_000
        for k in range(N):  # fresh bytes, but sequence numbers at or below one already used
            link.sock.send_multipart(_command(link, target, seq=older + k % 500))
        assert wait_until(lambda: host.received == received + 2 * N)
        assert host.accepted == 1
        assert host.rejects["replay"] == 2 * N
        link.close()


def test_fuzzed_messages_all_rejected_while_robot_holds(keys: Keys) -> None:
    n_fuzz = 10_000
    # An hours-long watchdog: this test is about the filter, not about scheduling on a busy
    # box (test_link_loss checks the watchdog).
    # A long episode: a simulated time limit would reset the arm (and its target) mid-test.
    task = {"name": "arm_reach", "episode_length_s": 1000.0}
    with running_host(keys, task=task, watchdog_periods=10**6) as host:
        link = _operator(keys, host)
        watch = link.subscribe()
        assert watch.recv(5.0) is not None
        assert link.control("resume", operator="alice").body["ok"]
        hold = host.filter.target.copy()
        LIMITS = (host.filter.low, host.filter.high, host.filter.max_step)
        keepalive = _command(link, hold)
        link.sock.send_multipart(keepalive)
        assert wait_until(lambda: host.accepted == 1)
        used = msgpack.unpackb(keepalive[0])["seq"]
        received = host.received
        fuzzer = CommandFuzzer(link.sender, link.seq, hold, LIMITS, used, seed=0)
        sent: Counter[str] = Counter()
        for i, (frames, reason) in enumerate(fuzzer.messages(n_fuzz)):
            link.sock.send_multipart(frames)
            sent[reason] += 1
            if i % 200 == 0:
                time.sleep(0.002)  # let the host drain (its receive queue holds 1000)
        assert wait_until(lambda: host.received == received + n_fuzz, timeout=30.0), host.received
        rejected = {k: v for k, v in host.rejects.items() if v}
        assert sum(rejected.values()) == n_fuzz
        assert rejected == dict(sent), (rejected, dict(sent))
        assert set(sent) == set(EXPECTED_REASON.values())  # every reason was exercised
        assert host.accepted == 1
        np.testing.assert_array_equal(host.filter.target, hold)
        # Every tick during the flood applied the held target. The host publishes a status
        # every tick for as long as it runs, so read what is queued for a bounded time (an
        # unbounded read ends only at a 50 ms scheduling gap: 30 s and more on a quiet box).
        statuses = []
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and (msg := watch.recv(0.05)) is not None:
            statuses.append(msg)
        running = [m for m in statuses if m.body["mode"] == "running"]
        assert running and all(np.array_equal(m.arrays["action"], hold) for m in running)
        assert host.mode == "running" and host.watchdog_stops == 0
        link.close()


def test_frame_over_maxmsgsize_never_reaches_the_host(keys: Keys) -> None:
    with running_host(keys) as host:
        link = _operator(keys, host)
        before = host.received
        header = msgpack.unpackb(_command(link, np.zeros(7))[0])
        header["arrays"] = [["action", "uint8", [1 << 20]]]
        link.sock.send_multipart([msgpack.packb(header), bytes(1 << 20)])
        time.sleep(0.5)
        assert host.received == before  # libzmq dropped the peer at MAXMSGSIZE
        link.close()
        again = _operator(keys, host)  # and a fresh connection works
        assert again.welcome is not None
        again.close()
