"""The HIL wire protocol: one msgpack header frame plus raw numpy buffer frames.

A message is a ZeroMQ multipart message:

    frame 0      msgpack map {"v", "type", "sender", "seq", "time", "body", "arrays"}
    frame 1..n   the raw bytes of each array named in "arrays", in order

`arrays` lists `[name, dtype, shape]` triples. A receiver checks, before it builds any
array: the total size against `max_message_bytes`, the header against msgpack's explicit
small limits, the header's fields and types, the frame count, the dtype against the
allowlist and against the negotiated schema, the shape against the schema, and each
buffer's byte length against dtype x shape. Only then is the buffer wrapped with
`np.frombuffer` (read-only, no copy). Nothing is ever unpickled: no pickle, no
`recv_pyobj`, no `allow_pickle` on any path here (tests/teleop/test_no_pickle_on_wire.py
scans for them). docs/decisions/0051-hil-wire-protocol.md explains the choices.

`ProtocolError.reason` is one of `REASONS`; receivers count rejects per reason.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

PROTOCOL_VERSION = 1
"""Bumped on any change a version-1 reader would misread; hello negotiates it."""
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)

MESSAGE_TYPES = ("hello", "welcome", "command", "control", "ack", "status", "error")

MAX_HEADER_BYTES = 64 * 1024
"""Frame 0 above this is rejected before msgpack sees it."""
MAX_ARRAYS = 16
MAX_NDIM = 4
MAX_ARRAY_BYTES = 32 * 1024 * 1024
MAX_STR_LEN = 4096
MAX_CONTAINER_LEN = 256
MAX_DEPTH = 6
SENDER_PATTERN = re.compile(r"^[A-Za-z0-9_.:@-]{1,64}$")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(/[A-Za-z0-9_]+)?$")

DTYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "uint8": np.dtype("|u1"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "bool": np.dtype("|b1"),
}
"""The only dtypes that cross the wire, by name, all little-endian (no object dtypes)."""

# Reject reasons (counted per reason by every receiver).
OVERSIZE = "oversize"
FRAMES = "frames"
BAD_MSGPACK = "bad_msgpack"
BAD_HEADER = "bad_header"
VERSION = "version"
UNKNOWN_TYPE = "unknown_type"
REPLAY = "replay"
DTYPE = "dtype"
SHAPE = "shape"
LENGTH = "length"
NOT_FINITE = "not_finite"
OUT_OF_RANGE = "out_of_range"
TOO_FAST = "too_fast"
NOT_CONTROLLER = "not_controller"
NOT_RUNNING = "not_running"
NO_HELLO = "no_hello"
TOO_MANY_SENDERS = "too_many_senders"
REASONS = (
    OVERSIZE,
    FRAMES,
    BAD_MSGPACK,
    BAD_HEADER,
    VERSION,
    UNKNOWN_TYPE,
    REPLAY,
    DTYPE,
    SHAPE,
    LENGTH,
    NOT_FINITE,
    OUT_OF_RANGE,
    TOO_FAST,
    NOT_CONTROLLER,
    NOT_RUNNING,
    NO_HELLO,
    TOO_MANY_SENDERS,
)


class ProtocolError(ValueError):
    """A message that must not be acted on; `reason` is one of `REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ArraySpec:
    """What one named array must be: dtype name from `DTYPES` and exact shape."""

    dtype: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {sorted(DTYPES)}")
        shape = tuple(int(s) for s in self.shape)
        if len(shape) > MAX_NDIM or any(s < 0 for s in shape):
            raise ValueError(f"shape {shape}: at most {MAX_NDIM} non-negative dimensions")
        object.__setattr__(self, "shape", shape)
        if self.nbytes > MAX_ARRAY_BYTES:
            raise ValueError(f"array of shape {shape} {self.dtype} exceeds {MAX_ARRAY_BYTES} bytes")

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPES[self.dtype].itemsize

    def to_wire(self) -> list[Any]:
        return [self.dtype, list(self.shape)]

    @classmethod
    def from_wire(cls, value: Any) -> ArraySpec:
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not isinstance(value[0], str)
            or not isinstance(value[1], list)
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in value[1])
        ):
            raise ValueError(f"array spec must be [dtype, [dims...]], got {value!r}")
        return cls(value[0], tuple(value[1]))


Schema = Mapping[str, Mapping[str, ArraySpec]]
"""Message type -> the exact arrays it carries (negotiated in hello/welcome)."""


@dataclass
class Message:
    type: str
    sender: str
    seq: int
    body: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    time: float = 0.0
    version: int = PROTOCOL_VERSION
    user_id: str = ""
    """The authenticated CURVE public key (Z85) of the peer, filled in by the receiver."""


class SequenceCounter:
    """Per-sender sequence numbers that keep rising across restarts: they start at the
    wall clock in nanoseconds, so a restarted sender is never mistaken for a replay."""

    def __init__(self, start: int | None = None) -> None:
        self._next = time.time_ns() if start is None else int(start)

    def next(self) -> int:
        value = self._next
        self._next += 1
        return value


class ReplayGuard:
    """Rejects a message whose sequence number is not above the last accepted one from the
    same (authenticated key, sender). Bounded: a key may use at most `max_senders` names."""

    def __init__(self, max_senders: int = 16) -> None:
        self.max_senders = max_senders
        self._last: dict[str, dict[str, int]] = {}

    def check(self, msg: Message) -> None:
        senders = self._last.setdefault(msg.user_id, {})
        last = senders.get(msg.sender)
        if last is None and len(senders) >= self.max_senders:
            raise ProtocolError(
                TOO_MANY_SENDERS, f"key already used {len(senders)} sender names; refusing more"
            )
        if last is not None and msg.seq <= last:
            raise ProtocolError(
                REPLAY, f"seq {msg.seq} from {msg.sender!r} is not above the last seen {last}"
            )
        senders[msg.sender] = msg.seq

    def forget(self, user_id: str) -> None:
        self._last.pop(user_id, None)


def _packable(value: Any, depth: int = 0) -> Any:
    """Body values as msgpack-native types (numpy scalars to Python; tuples to lists)."""
    if depth > MAX_DEPTH:
        raise ValueError("message body is nested too deeply")
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): _packable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_packable(v, depth + 1) for v in value]
    raise TypeError(f"cannot send a {type(value).__name__} in a message body")


def encode(msg: Message) -> list[bytes | memoryview]:
    """The frames of `msg`: header then one contiguous buffer per array (no copy for
    contiguous little-endian arrays)."""
    specs = []
    buffers: list[bytes | memoryview] = []
    for name, arr in msg.arrays.items():
        a = np.asarray(arr)
        dtype_name = next((n for n, d in DTYPES.items() if d == a.dtype), None)
        if dtype_name is None:
            a = a.astype(a.dtype.newbyteorder("<"))
            dtype_name = next((n for n, d in DTYPES.items() if d == a.dtype), None)
            if dtype_name is None:
                raise ValueError(f"array {name!r} has dtype {arr.dtype}; allowed: {sorted(DTYPES)}")
        a = np.ascontiguousarray(a)
        specs.append([name, dtype_name, list(a.shape)])
        buffers.append(a.reshape(-1).view(np.uint8).data)
    header = {
        "v": msg.version,
        "type": msg.type,
        "sender": msg.sender,
        "seq": int(msg.seq),
        "time": float(msg.time or time.time()),
        "body": _packable(msg.body),
        "arrays": specs,
    }
    packed = msgpack.packb(header, use_bin_type=True)
    if len(packed) > MAX_HEADER_BYTES:
        raise ValueError(f"message header is {len(packed)} bytes; the limit is {MAX_HEADER_BYTES}")
    return [packed, *buffers]


def _unpack_header(raw: bytes | memoryview) -> Any:
    try:
        return msgpack.unpackb(
            raw,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_str_len=MAX_STR_LEN,
            max_bin_len=0,  # no binary blobs in headers: arrays travel as frames
            max_array_len=MAX_CONTAINER_LEN,
            max_map_len=MAX_CONTAINER_LEN,
            max_ext_len=0,  # no extension types (timestamps, custom objects)
        )
    except Exception as exc:  # ExtraData, FormatError, StackError, ValueError, Unicode...
        raise ProtocolError(BAD_MSGPACK, f"{type(exc).__name__}: {exc}") from None


def _check_body(value: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ProtocolError(BAD_HEADER, "body is nested too deeply")
    if isinstance(value, dict):
        for v in value.values():
            _check_body(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_body(v, depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ProtocolError(NOT_FINITE, "non-finite number in the message body")
    elif not (isinstance(value, bool | int | float | str) or value is None):
        raise ProtocolError(BAD_HEADER, f"body holds a {type(value).__name__}")


def _field(header: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = header.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ProtocolError(BAD_HEADER, f"header field {key!r} is missing or not {kind}")
    return value


def decode(
    frames: Sequence[bytes | memoryview],
    *,
    schema: Schema | None = None,
    max_message_bytes: int = 1 << 20,
    versions: Sequence[int] = SUPPORTED_VERSIONS,
    types: Sequence[str] = MESSAGE_TYPES,
    optional_prefixes: tuple[str, ...] = (),
) -> Message:
    """Check and decode one multipart message. `schema` gives, per message type, the exact
    arrays allowed (a type not in it may carry none); arrays whose name starts with one of
    `optional_prefixes` may be left out (camera frames). Raises `ProtocolError`."""
    if not frames:
        raise ProtocolError(FRAMES, "empty message")
    total = sum(len(f) for f in frames)
    if total > max_message_bytes:
        raise ProtocolError(OVERSIZE, f"{total} bytes; the limit is {max_message_bytes}")
    if len(frames) > MAX_ARRAYS + 1:
        raise ProtocolError(FRAMES, f"{len(frames)} frames; at most {MAX_ARRAYS + 1}")
    if len(frames[0]) > MAX_HEADER_BYTES:
        raise ProtocolError(OVERSIZE, f"header of {len(frames[0])} bytes > {MAX_HEADER_BYTES}")
    header = _unpack_header(frames[0])
    if not isinstance(header, dict):
        raise ProtocolError(BAD_HEADER, f"header is a {type(header).__name__}, not a map")
    unknown = set(header) - {"v", "type", "sender", "seq", "time", "body", "arrays"}
    if unknown:
        raise ProtocolError(BAD_HEADER, f"unknown header field(s) {sorted(unknown)}")
    version = _field(header, "v", int)
    if version not in versions:
        raise ProtocolError(
            VERSION, f"protocol version {version}; this side speaks {list(versions)}"
        )
    mtype = _field(header, "type", str)
    if mtype not in types:
        raise ProtocolError(
            UNKNOWN_TYPE, f"message type {mtype[:32]!r} is not one of {list(types)}"
        )
    sender = _field(header, "sender", str)
    if not SENDER_PATTERN.match(sender):
        raise ProtocolError(BAD_HEADER, "sender must be 1-64 characters of [A-Za-z0-9_.:@-]")
    seq = _field(header, "seq", int)
    if not 0 <= seq < 2**63:
        raise ProtocolError(BAD_HEADER, f"seq {seq} is outside [0, 2^63)")
    sent_at = _field(header, "time", (float, int))
    body = _field(header, "body", dict)
    _check_body(body)
    specs = _field(header, "arrays", list)
    if len(specs) != len(frames) - 1:
        raise ProtocolError(
            FRAMES, f"header names {len(specs)} arrays but {len(frames) - 1} buffer frames came"
        )
    expected = dict((schema or {}).get(mtype, {}))
    arrays: dict[str, np.ndarray] = {}
    for spec, buf in zip(specs, frames[1:], strict=True):
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str)):
            raise ProtocolError(BAD_HEADER, "each array entry must be [name, dtype, shape]")
        name, dtype_name, shape = spec
        if not NAME_PATTERN.match(name) or name in arrays:
            raise ProtocolError(BAD_HEADER, f"bad or repeated array name {name[:32]!r}")
        want = expected.pop(name, None)
        if want is None:
            raise ProtocolError(
                SHAPE, f"{mtype} carries no array {name!r} in the negotiated schema"
            )
        if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
            raise ProtocolError(DTYPE, f"array {name!r}: dtype {dtype_name!r} is not allowed")
        if dtype_name != want.dtype:
            raise ProtocolError(DTYPE, f"array {name!r}: dtype {dtype_name}, expected {want.dtype}")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape)
            or tuple(shape) != want.shape
        ):
            raise ProtocolError(
                SHAPE, f"array {name!r}: shape {shape!r}, expected {list(want.shape)}"
            )
        if len(buf) != want.nbytes:
            raise ProtocolError(LENGTH, f"array {name!r}: {len(buf)} bytes, expected {want.nbytes}")
        arr = np.frombuffer(buf, dtype=DTYPES[dtype_name]).reshape(want.shape)
        arrays[name] = arr
    missing = sorted(n for n in expected if not n.startswith(optional_prefixes))
    if missing:
        raise ProtocolError(SHAPE, f"{mtype} is missing array(s) {missing}")
    return Message(
        type=mtype,
        sender=sender,
        seq=seq,
        body=body,
        arrays=arrays,
        time=float(sent_at),
        version=version,
    )


def schema_to_wire(schema: Schema) -> dict[str, dict[str, list[Any]]]:
    return {t: {n: s.to_wire() for n, s in arrays.items()} for t, arrays in schema.items()}


def schema_from_wire(value: Any) -> dict[str, dict[str, ArraySpec]]:
    if not isinstance(value, dict):
        raise ProtocolError(BAD_HEADER, "schema must be a map of message type -> arrays")
    out: dict[str, dict[str, ArraySpec]] = {}
    try:
        for mtype, arrays in value.items():
            if mtype not in MESSAGE_TYPES or not isinstance(arrays, dict):
                raise ValueError(f"bad schema entry {mtype!r}")
            out[mtype] = {str(n): ArraySpec.from_wire(s) for n, s in arrays.items()}
    except ValueError as exc:
        raise ProtocolError(BAD_HEADER, f"schema: {exc}") from None
    return out


def schema_bytes(schema: Schema, mtype: str) -> int:
    """Largest payload a message of `mtype` carries under `schema` (for size limits)."""
    return sum(s.nbytes for s in schema.get(mtype, {}).values())
