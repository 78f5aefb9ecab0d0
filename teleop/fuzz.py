"""Fuzzed command messages for a robot host, each with the reject reason it must get:
truncated, wrong dtype or shape, NaN/inf, out of range, too fast, oversize, bad msgpack,
bad headers, unknown types, wrong versions and replays. Used by the security test and
`unilab bench hil --part security`."""

from __future__ import annotations

from collections.abc import Iterator

import msgpack
import numpy as np

from unilab.teleop.protocol import Message, SequenceCounter, encode

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


class CommandFuzzer:
    """Fuzzed messages from `sender` around the hold `target` of a robot whose filter has
    `low`, `high` and `max_step`. `used_seq` is a sequence number the host already
    accepted from this sender (for the replays)."""

    def __init__(
        self,
        sender: str,
        seq: SequenceCounter,
        target: np.ndarray,
        limits: tuple[np.ndarray, np.ndarray, np.ndarray],
        used_seq: int,
        seed: int = 0,
    ) -> None:
        self.sender = sender
        self.seq = seq
        self.target = np.asarray(target, np.float32)
        self.limits = limits
        self.used_seq = used_seq
        self.rng = np.random.default_rng(seed)

    def command(self, action: np.ndarray, seq: int | None = None) -> list[bytes]:
        msg = Message(
            "command",
            self.sender,
            self.seq.next() if seq is None else seq,
            {"source": "policy", "operator": self.sender, "answers": 0},
            {"action": np.asarray(action, np.float32)},
        )
        return [bytes(f) for f in encode(msg)]

    def messages(self, n: int) -> Iterator[tuple[list[bytes], str]]:
        for _ in range(n):
            kind = FUZZ_KINDS[int(self.rng.integers(0, len(FUZZ_KINDS)))]
            yield self.fuzz(kind), EXPECTED_REASON[kind]

    def fuzz(self, kind: str) -> list[bytes]:
        target, rng, used = self.target, self.rng, self.used_seq
        good = self.command(target)
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
                header["arrays"] = [
                    ["action", str(rng.choice(["object", "<U4", ">f4", "O"])), [int(target.size)]]
                ]
            return [msgpack.packb(header), arr.tobytes()]
        if kind in ("nan", "inf", "out_of_range", "too_fast"):
            bad = target.copy()
            i = int(rng.integers(0, bad.size))
            bad[i] = {"nan": np.nan, "inf": np.inf, "out_of_range": 1e3, "too_fast": 0.0}[kind]
            if kind == "too_fast":  # one entry jumps 1.5 max steps, towards the middle of its range
                low, high, step = self.limits
                bad[i] = target[i] + (1.5 if target[i] < (low[i] + high[i]) / 2 else -1.5) * step[i]
            return self.command(bad.astype(np.float32))
        if kind == "oversize":
            pad = bytes(40_000)
            header["arrays"] = [
                ["action", "float32", [int(target.size)]],
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
        raise ValueError(f"unknown fuzz kind {kind!r}; kinds: {FUZZ_KINDS}")
