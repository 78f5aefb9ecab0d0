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

from unilab.teleop.keys import load_public, load_secret
from unilab.teleop.link import ClientLink, LinkError, StatusSubscriber
from unilab.teleop.protocol import Message, encode

N = 1000
LIMITS: tuple[np.ndarray, np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0), np.zeros(0))


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


FUZZ_KINDS = (
    "truncated_header",
    "truncated_buffer",
    "missing_frame",
    "wrong_dtype",
    "bad_dtype_name",
    "wrong_shape",
    "nan",
    "inf",
    "out_of_range",
    "too_fast",
    "oversize",
    "bad_msgpack",
    "not_a_map",
    "ext_type",
    "missing_field",
    "unknown_type",
    "bad_version",
    "replay",
)
EXPECTED_REASON = {
    "truncated_header": "bad_msgpack",
    "truncated_buffer": "length",
    "missing_frame": "frames",
    "wrong_dtype": "dtype",
    "bad_dtype_name": "dtype",
    "wrong_shape": "shape",
    "nan": "not_finite",
    "inf": "not_finite",
    "out_of_range": "out_of_range",
    "too_fast": "too_fast",
    "oversize": "oversize",
    "bad_msgpack": "bad_msgpack",
    "not_a_map": "bad_header",
    "ext_type": "bad_msgpack",
    "missing_field": "bad_header",
    "unknown_type": "unknown_type",
    "bad_version": "version",
    "replay": "replay",
}


def _fuzz(
    kind: str, link: ClientLink, target: np.ndarray, rng: np.random.Generator, used: int
) -> list[bytes]:
    good = _command(link, target)
    header = msgpack.unpackb(good[0])
    if kind == "truncated_header":
        return [good[0][: int(rng.integers(1, len(good[0])))], good[1]]
    if kind == "truncated_buffer":
        return [good[0], good[1][: int(rng.integers(0, len(good[1])))]]
    if kind == "missing_frame":
        return [good[0]]
    if kind in ("wrong_dtype", "bad_dtype_name", "wrong_shape"):
        arr = target.astype(np.float64) if kind == "wrong_dtype" else target
        if kind == "wrong_shape":
            arr = target[:-1]
        header["arrays"] = [
            ["action", "float64" if kind == "wrong_dtype" else "object", list(arr.shape)]
        ]
        if kind == "wrong_shape":
            header["arrays"] = [["action", "float32", list(arr.shape)]]
        if kind == "bad_dtype_name":
            header["arrays"] = [["action", str(rng.choice(["object", "<U4", ">f4", "O"])), [7]]]
        return [msgpack.packb(header), arr.tobytes()]
    if kind in ("nan", "inf", "out_of_range", "too_fast"):
        bad = target.copy()
        i = int(rng.integers(0, bad.size))
        bad[i] = {"nan": np.nan, "inf": np.inf, "out_of_range": 1e3, "too_fast": 0.0}[kind]
        if kind == "too_fast":  # one entry jumps 1.5 max steps, towards the middle of its range
            low, high, step = LIMITS
            bad[i] = target[i] + (1.5 if target[i] < (low[i] + high[i]) / 2 else -1.5) * step[i]
        return _command(link, bad.astype(np.float32))
    if kind == "oversize":
        pad = bytes(40_000)
        header["arrays"] = [
            ["action", "float32", [7]],
            ["pad_a", "uint8", [40_000]],
            ["pad_b", "uint8", [40_000]],
        ]
        return [msgpack.packb(header), good[1], pad, pad]
    if kind == "bad_msgpack":
        return [bytes([0xC1]) + rng.bytes(int(rng.integers(0, 64))), good[1]]
    if kind == "not_a_map":
        return [msgpack.packb([1, 2, 3]), good[1]]
    if kind == "ext_type":
        header["body"] = {"x": msgpack.ExtType(42, b"\x80\x04")}  # a pickle opcode in an ext
        return [msgpack.packb(header), good[1]]
    if kind == "missing_field":
        del header[str(rng.choice(["v", "type", "sender", "seq", "body", "arrays"]))]
        return [msgpack.packb(header), good[1]]
    if kind == "unknown_type":
        header["type"] = "exec"
        return [msgpack.packb(header), good[1]]
    if kind == "bad_version":
        header["v"] = 99
        return [msgpack.packb(header), good[1]]
    if kind == "replay":
        header["seq"] = used
        return [msgpack.packb(header), good[1]]
    raise AssertionError(kind)


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
        global LIMITS
        LIMITS = (host.filter.low, host.filter.high, host.filter.max_step)
        keepalive = _command(link, hold)
        link.sock.send_multipart(keepalive)
        assert wait_until(lambda: host.accepted == 1)
        used = msgpack.unpackb(keepalive[0])["seq"]
        received = host.received
        rng = np.random.default_rng(0)
        sent: Counter[str] = Counter()
        for i in range(n_fuzz):
            kind = FUZZ_KINDS[int(rng.integers(0, len(FUZZ_KINDS)))]
            link.sock.send_multipart(_fuzz(kind, link, hold, rng, used))
            sent[EXPECTED_REASON[kind]] += 1
            if i % 200 == 0:
                time.sleep(0.002)  # let the host drain (its receive queue holds 1000)
        assert wait_until(lambda: host.received == received + n_fuzz, timeout=30.0), host.received
        rejected = {k: v for k, v in host.rejects.items() if v}
        assert sum(rejected.values()) == n_fuzz
        assert rejected == dict(sent), (rejected, dict(sent))
        assert host.accepted == 1
        np.testing.assert_array_equal(host.filter.target, hold)
        # Every tick during the flood applied the held target.
        statuses = []
        while (msg := watch.recv(0.05)) is not None:
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
