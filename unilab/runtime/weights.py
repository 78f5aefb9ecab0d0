"""Double-buffered shared weight block with a seqlock: one writer, many readers, no locks.

Control words (int64): LATEST (newest complete version), and per buffer b in {0, 1} a
sequence counter SEQ[b], the version VER[b] it holds and a checksum CHK[b] of that version
number and its data. Version v goes to buffer v % 2:

    writer:  SEQ[b] += 1 (odd) ; copy data ; CHK[b] = crc(v, data) ; VER[b] = v ;
             SEQ[b] += 1 (even) ; LATEST = v
    reader:  v = LATEST ; b = v % 2 ; s1 = SEQ[b] ; copy data ; u = VER[b] ; c = CHK[b] ;
             s2 = SEQ[b] ; the copy is whole iff s1 == s2, s1 is even, and (with checksums)
             crc(u, copy) == c; it then holds version u

The writer always writes the buffer *not* holding LATEST, so a reader only retries when the
writer laps it (publishes twice during one read). The stores happen in program order in
separate C calls, and Python has no memory fence. x86-64 keeps stores, and loads, in order
(TSO), so there the seqlock alone is exact. Weaker memory models (aarch64: Apple silicon,
Graviton, Jetson) may make the data stores visible after the sequence stores, or let the
reader's loads pass each other; there the reader verifies the checksum, which does not
depend on any ordering: a copy is accepted only if it is, byte for byte, a version the
writer published, under that version's number. Checksums are on by default everywhere but
x86-64 (`WeightStore.create(checksum=...)`); the cost is measured in docs/decisions/0061.
"""

from __future__ import annotations

import os
import platform
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from unilab.runtime.shm import Segment, SegmentOwner

_LATEST = 0
_SEQ = (1, 2)
_VER = (3, 4)
_CHK = (5, 6)
_FLAGS = 7  # bit 0: the writer stores checksums
_CONTROL_BYTES = 64
DTYPE = np.dtype(np.float32)
TSO_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})
"""`platform.machine()` values with total store order: the seqlock alone is exact there."""


def checksums_needed() -> bool:
    """True on machines whose memory model may reorder stores (everything but x86)."""
    return platform.machine().lower() not in TSO_MACHINES


def weights_checksum(version: int, data: np.ndarray) -> int:
    """CRC-32 of the version number followed by the float32 data (as stored in CHK)."""
    head = zlib.crc32(int(version).to_bytes(8, "little", signed=True))
    return zlib.crc32(np.ascontiguousarray(data).view(np.uint8).data, head)


@dataclass(frozen=True)
class WeightLayout:
    """Named tensors packed into one flat float32 vector, in the given order."""

    entries: tuple[tuple[str, tuple[int, ...]], ...]

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, tuple[int, ...]]) -> WeightLayout:
        return cls(tuple((name, tuple(int(d) for d in shape)) for name, shape in shapes.items()))

    @classmethod
    def flat(cls, num_floats: int) -> WeightLayout:
        return cls((("flat", (int(num_floats),)),))

    @property
    def num_floats(self) -> int:
        return sum(int(np.prod(shape, dtype=np.int64)) for _, shape in self.entries)

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Views of `flat` shaped per entry (no copy)."""
        if flat.shape != (self.num_floats,):
            raise ValueError(f"expected a flat array of {self.num_floats} floats, got {flat.shape}")
        out, start = {}, 0
        for name, shape in self.entries:
            n = int(np.prod(shape, dtype=np.int64))
            out[name] = flat[start : start + n].reshape(shape)
            start += n
        return out

    def flatten(
        self, arrays: Mapping[str, np.ndarray], out: np.ndarray | None = None
    ) -> np.ndarray:
        if out is None:
            out = np.empty(self.num_floats, DTYPE)
        missing = [name for name, _ in self.entries if name not in arrays]
        if missing:
            raise KeyError(f"flatten: missing entries {missing}; layout has {self.names}")
        for name, view in self.unflatten(out).items():
            if arrays[name].shape != view.shape:
                raise ValueError(f"entry {name!r}: shape {arrays[name].shape} != {view.shape}")
            view[...] = arrays[name]
        return out

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.entries]


@dataclass(frozen=True)
class WeightHandle:
    segment_name: str
    segment_size: int
    layout: WeightLayout


class WeightStore:
    """Create with `WeightStore.create` (learner), attach with `WeightStore.attach` (workers).

    Exactly one process may `publish`; any number may `read_if_newer`. `checksum` (set by
    the creator, seen by every attacher) makes readers verify each copy (see module doc).
    """

    def __init__(self, segment: Segment, layout: WeightLayout, *, writer: bool = True) -> None:
        self.layout = layout
        self.writer = writer
        self.num_floats = layout.num_floats
        self._segment = segment
        self._control = segment.array(np.int64, (8,), 0)
        stride = _buffer_stride(self.num_floats)
        self._buffers = [
            segment.array(DTYPE, (self.num_floats,), _CONTROL_BYTES + b * stride) for b in (0, 1)
        ]
        self._written = int(self._control[_LATEST])
        self.checksum = bool(int(self._control[_FLAGS]) & 1)
        self.retries = 0  # reader collisions with the writer, for diagnostics
        self.checksum_rejects = 0  # copies the seqlock passed and the checksum did not

    @classmethod
    def create(
        cls,
        owner: SegmentOwner,
        layout: WeightLayout | int,
        *,
        name: str = "weights",
        checksum: bool | None = None,
    ) -> WeightStore:
        """`checksum`: None (default) turns it on where the memory model needs it
        (`checksums_needed()`: not x86-64); True/False force it either way."""
        if isinstance(layout, int | np.integer):
            layout = WeightLayout.flat(int(layout))
        if layout.num_floats < 1:
            raise ValueError("a weight store needs at least one float")
        size = _CONTROL_BYTES + 2 * _buffer_stride(layout.num_floats)
        segment = owner.create(name, size)
        use = checksums_needed() if checksum is None else bool(checksum)
        segment.array(np.int64, (8,), 0)[_FLAGS] = int(use)
        return cls(segment, layout)

    @classmethod
    def attach(cls, handle: WeightHandle, *, writer: bool = False) -> WeightStore:
        """Map the store in another process; read-only unless `writer` (one writer per run)."""
        segment = Segment.attach(handle.segment_name, handle.segment_size)
        return cls(segment, handle.layout, writer=writer)

    def handle(self) -> WeightHandle:
        return WeightHandle(self._segment.name, self._segment.size, self.layout)

    @property
    def version(self) -> int:
        """Newest complete version (0: nothing published yet)."""
        return int(self._control[_LATEST])

    def publish(self, flat_params: np.ndarray, version: int | None = None) -> int:
        """Write a new version and return its number (1, 2, ...). Single writer only.
        `version` (newer than any written) numbers it as a remote learner did."""
        if not self.writer:
            raise PermissionError("this WeightStore was attached read-only (attach(writer=True))")
        if flat_params.shape != (self.num_floats,):
            raise ValueError(
                f"publish: expected shape ({self.num_floats},), got {flat_params.shape}"
            )
        if version is None:
            version = self._written + 1
        elif version <= self._written:
            raise ValueError(f"publish: version {version} is not newer than {self._written}")
        b = version & 1
        control = self._control
        control[_SEQ[b]] += 1  # odd: buffer b is being written
        self._buffers[b][:] = flat_params
        if self.checksum:
            control[_CHK[b]] = weights_checksum(version, self._buffers[b])
        control[_VER[b]] = version
        control[_SEQ[b]] += 1  # even: buffer b is whole again
        control[_LATEST] = version
        self._written = version
        return version

    def read_if_newer(
        self, last_version: int, out: np.ndarray | None = None, *, timeout: float = 1.0
    ) -> tuple[int, np.ndarray] | None:
        """(version, copy) when a version newer than `last_version` exists, else None.

        The copy is never torn (and, with checksums, never torn on any memory model).
        `out` (float32, num_floats) avoids an allocation; the returned array is then `out`.
        """
        if out is None:
            out = np.empty(self.num_floats, DTYPE)
        elif out.shape != (self.num_floats,) or out.dtype != DTYPE:
            raise ValueError(f"out must be float32 of shape ({self.num_floats},)")
        control = self._control
        deadline = None
        while True:
            version = int(control[_LATEST])
            if version <= last_version:
                return None
            b = version & 1
            seq_before = int(control[_SEQ[b]])
            if not seq_before & 1:
                out[:] = self._buffers[b]
                held = int(control[_VER[b]])
                stored = int(control[_CHK[b]])
                if int(control[_SEQ[b]]) == seq_before:
                    if not self.checksum or weights_checksum(held, out) == stored:
                        return (held, out) if held > last_version else None
                    self.checksum_rejects += 1
            self.retries += 1
            if deadline is None:
                deadline = time.monotonic() + timeout
            elif time.monotonic() > deadline:
                raise TimeoutError(
                    f"read_if_newer: no whole copy within {timeout} s; is more than one "
                    f"process publishing? (pid {os.getpid()})"
                )

    def close(self) -> None:
        self._buffers = []
        self._segment.close()


def _buffer_stride(num_floats: int) -> int:
    nbytes = num_floats * DTYPE.itemsize
    return (nbytes + 63) // 64 * 64
