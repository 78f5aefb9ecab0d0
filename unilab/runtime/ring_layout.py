"""Byte layout of the ring segment, computed identically by the learner and every worker.

Segment = slot headers (one 64-byte line of int64 words per slot) followed by the slots'
data. Worker w owns slots w*K .. w*K+K-1; a slot holds, per field, a C-contiguous
(T, n_envs_w, *field_shape) array starting on a 64-byte boundary.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from unilab.runtime.chunk_spec import ChunkSpec, PlainSpec
from unilab.runtime.shm import Segment

ALIGN = 64
HEADER_WORDS = 8  # int64 words per slot header: one cache line

# Header word indices.
H_STATE = 0
H_SEQ = 1
H_WORKER = 2
H_GENERATION = 3
H_POLICY_VERSION = 4
H_STEP_COUNT = 5
H_PUBLISH_NS = 6  # time.monotonic_ns() at publish, for hand-off latency and lag


class SlotState(enum.IntEnum):
    """Who may touch a slot. Each transition is made by exactly one side."""

    FREE = 1  # learner -> worker (release)
    WRITING = 2  # worker took it (acquire)
    PUBLISHED = 3  # worker finished writing (publish)
    READING = 4  # learner took it (get_ready)


@dataclass(frozen=True)
class SlotHeader:
    slot: int
    state: SlotState
    worker_id: int
    generation: int
    """Which incarnation of the worker wrote it (0 = first start, +1 per restart)."""
    seq: int
    policy_version: int
    step_count: int
    publish_ns: int


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class RingParams:
    """Everything that determines the layout; plain values, so it can cross processes."""

    spec: PlainSpec
    envs_per_worker: tuple[int, ...]
    chunk_len: int
    slots_per_worker: int

    @classmethod
    def build(
        cls,
        spec: ChunkSpec,
        num_workers: int,
        envs_per_worker: int | Sequence[int],
        chunk_len: int,
        slots_per_worker: int,
    ) -> RingParams:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if isinstance(envs_per_worker, int | np.integer):
            envs = (int(envs_per_worker),) * num_workers
        else:
            envs = tuple(int(n) for n in envs_per_worker)
            if len(envs) != num_workers:
                raise ValueError(
                    f"envs_per_worker lists {len(envs)} workers but num_workers is {num_workers}"
                )
        if any(n < 1 for n in envs):
            raise ValueError(f"every worker needs >= 1 env, got envs_per_worker={envs}")
        if chunk_len < 1:
            raise ValueError(f"chunk_len must be >= 1, got {chunk_len}")
        if not 1 <= slots_per_worker <= 64:
            raise ValueError(f"slots_per_worker must be in 1..64, got {slots_per_worker}")
        if num_workers * slots_per_worker > 16384:
            # Every outstanding slot id must fit in one pipe buffer (64 KiB of int32).
            raise ValueError("num_workers * slots_per_worker must be <= 16384")
        return cls(spec.to_plain(), envs, int(chunk_len), int(slots_per_worker))

    @property
    def num_workers(self) -> int:
        return len(self.envs_per_worker)

    @property
    def num_slots(self) -> int:
        return self.num_workers * self.slots_per_worker


class RingLayout:
    def __init__(self, params: RingParams) -> None:
        self.params = params
        self.spec = ChunkSpec.from_plain(params.spec)
        self.num_slots = params.num_slots
        self.header_bytes = _align(self.num_slots * HEADER_WORDS * 8)
        # slot -> field -> (offset, shape)
        self.fields: list[dict[str, tuple[int, tuple[int, ...]]]] = []
        offset = self.header_bytes
        for slot in range(self.num_slots):
            n_envs = params.envs_per_worker[self.worker_of(slot)]
            per_field = {}
            for name, field in self.spec.items():
                shape = (params.chunk_len, n_envs, *field.shape)
                per_field[name] = (offset, shape)
                offset = _align(offset + int(np.prod(shape, dtype=np.int64)) * field.dtype.itemsize)
            self.fields.append(per_field)
        self.total_bytes = offset

    def worker_of(self, slot: int) -> int:
        return slot // self.params.slots_per_worker

    def slots_of(self, worker_id: int) -> range:
        k = self.params.slots_per_worker
        return range(worker_id * k, (worker_id + 1) * k)

    def slot_bytes(self, slot: int) -> int:
        return sum(
            int(np.prod(shape, dtype=np.int64)) * self.spec[name].dtype.itemsize
            for name, (_, shape) in self.fields[slot].items()
        )


def map_ring(
    segment: Segment, layout: RingLayout
) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """Zero-copy views of a ring segment: (headers (num_slots, 8) int64, per-slot field views)."""
    headers = segment.array(np.int64, (layout.num_slots, HEADER_WORDS), 0)
    views = [
        {
            name: segment.array(layout.spec[name].dtype, shape, offset)
            for name, (offset, shape) in per_field.items()
        }
        for per_field in layout.fields
    ]
    return headers, views


def read_header(headers: np.ndarray, slot: int) -> SlotHeader:
    h = headers[slot].tolist()
    return SlotHeader(
        slot=slot,
        state=SlotState(h[H_STATE]),
        worker_id=h[H_WORKER],
        generation=h[H_GENERATION],
        seq=h[H_SEQ],
        policy_version=h[H_POLICY_VERSION],
        step_count=h[H_STEP_COUNT],
        publish_ns=h[H_PUBLISH_NS],
    )
