"""The wire format offline: round trips, and every check `decode` makes before it builds an
array, each with its reject reason."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from unilab.teleop.protocol import (
    MAX_HEADER_BYTES,
    ArraySpec,
    Message,
    ProtocolError,
    ReplayGuard,
    SequenceCounter,
    decode,
    encode,
    schema_from_wire,
    schema_to_wire,
)

SCHEMA = {
    "command": {"action": ArraySpec("float32", (7,))},
    "status": {
        "obs/policy": ArraySpec("float32", (30,)),
        "images/scene": ArraySpec("uint8", (4, 5, 3)),
    },
}


def frames(msg: Message) -> list[bytes]:
    return [bytes(f) for f in encode(msg)]


def command(action: np.ndarray | None = None, **header: object) -> list[bytes]:
    msg = Message(
        "command",
        "op",
        5,
        {"source": "policy"},
        {"action": np.arange(7, dtype=np.float32) if action is None else action},
    )
    out = frames(msg)
    if header:
        doc = msgpack.unpackb(out[0])
        doc.update(header)
        out[0] = msgpack.packb(doc)
    return out


def reason(parts: list[bytes], **kw: object) -> str:
    with pytest.raises(ProtocolError) as info:
        decode(parts, schema=SCHEMA, **kw)  # type: ignore[arg-type]
    return info.value.reason


def test_round_trip_is_zero_copy_and_read_only() -> None:
    img = np.random.default_rng(0).integers(0, 255, (4, 5, 3), dtype=np.uint8)
    msg = Message(
        "status",
        "robot-1",
        42,
        {"tick": 3, "nested": {"a": [1, 2.5, None]}},
        {"obs/policy": np.ones(30, np.float32), "images/scene": img},
    )
    out = decode(frames(msg), schema=SCHEMA)
    assert (out.type, out.sender, out.seq, out.body) == ("status", "robot-1", 42, msg.body)
    np.testing.assert_array_equal(out.arrays["images/scene"], img)
    assert not out.arrays["obs/policy"].flags.writeable
    with pytest.raises(ProtocolError, match="missing"):
        decode(
            frames(Message("status", "r", 1, {}, {"obs/policy": np.ones(30, np.float32)})),
            schema=SCHEMA,
        )
    ok = decode(
        frames(Message("status", "r", 1, {}, {"obs/policy": np.ones(30, np.float32)})),
        schema=SCHEMA,
        optional_prefixes=("images/",),
    )
    assert list(ok.arrays) == ["obs/policy"]


def test_each_check_has_its_reason() -> None:
    good = command()
    assert decode(good, schema=SCHEMA).arrays["action"].dtype == np.float32
    assert reason([good[0], good[1][:-1]]) == "length"
    assert reason([good[0]]) == "frames"
    assert reason(good, max_message_bytes=10) == "oversize"
    assert reason([bytes(MAX_HEADER_BYTES + 1), good[1]], max_message_bytes=1 << 30) == "oversize"
    assert reason([b"\xc1", good[1]]) == "bad_msgpack"
    assert reason([good[0][:5], good[1]]) == "bad_msgpack"
    assert reason([good[0] + b"\x00", good[1]]) == "bad_msgpack"  # ExtraData
    assert (
        reason([msgpack.packb({"v": 1, "x": msgpack.ExtType(1, b"ab")}), good[1]]) == "bad_msgpack"
    )
    assert reason([msgpack.packb({"body": b"raw bytes"}), good[1]]) == "bad_msgpack"
    assert reason([msgpack.packb([1] * 300), good[1]]) == "bad_msgpack"  # container limit
    assert reason([msgpack.packb("x"), good[1]]) == "bad_header"
    assert reason(command(v=2)) == "version"
    assert reason(command(type="eval")) == "unknown_type"
    assert reason(command(seq=-1)) == "bad_header"
    assert reason(command(sender="a b")) == "bad_header"
    assert reason(command(extra=1)) == "bad_header"
    assert reason(command(body={"x": float("nan")})) == "not_finite"
    assert reason(command(arrays=[["action", "float64", [7]]])) == "dtype"
    assert reason(command(arrays=[["action", "object", [7]]])) == "dtype"
    assert reason(command(arrays=[["action", "float32", [7, 1]]])) == "shape"
    assert reason(command(arrays=[["other", "float32", [7]]])) == "shape"
    assert (
        reason([*command(arrays=[["action", "float32", [7]], ["action", "float32", [7]]]), good[1]])
        == "bad_header"
    )


def test_encode_refuses_what_cannot_cross() -> None:
    with pytest.raises(ValueError, match="dtype"):
        encode(Message("command", "op", 1, {}, {"action": np.zeros(3, dtype=object)}))
    with pytest.raises(TypeError):
        encode(Message("command", "op", 1, {"f": object()}, {}))
    big_endian = decode(
        frames(Message("command", "op", 1, {}, {"action": np.arange(7, dtype=">f4")})),
        schema=SCHEMA,
    )
    np.testing.assert_array_equal(big_endian.arrays["action"], np.arange(7))


def test_schema_round_trip_and_limits() -> None:
    assert schema_from_wire(schema_to_wire(SCHEMA)) == SCHEMA
    with pytest.raises(ValueError):
        ArraySpec("float16", (3,))
    with pytest.raises(ValueError):
        ArraySpec("uint8", (1 << 14, 1 << 14, 3))
    with pytest.raises(ProtocolError):
        schema_from_wire({"command": {"action": ["float32", "7"]}})


def test_replay_guard_and_sequence_counter() -> None:
    guard = ReplayGuard(max_senders=2)
    msg = Message("command", "op", 10, user_id="KEY")
    guard.check(msg)
    with pytest.raises(ProtocolError, match="replay"):
        guard.check(msg)
    guard.check(Message("command", "op", 10, user_id="OTHER"))  # separate per key
    guard.check(Message("command", "op2", 1, user_id="KEY"))
    with pytest.raises(ProtocolError) as info:
        guard.check(Message("command", "op3", 1, user_id="KEY"))
    assert info.value.reason == "too_many_senders"
    a, b = SequenceCounter(), SequenceCounter()
    assert b.next() > a.next()  # a restarted sender keeps rising
