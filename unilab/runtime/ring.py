"""The shared-memory ring buffer, learner side: creates the memory, receives ready slots.

Protocol (each arrow is made by one side only, so no locks are needed):

    worker: FREE -> WRITING (acquire) -> PUBLISHED (publish, then its slot id into `ready`)
    learner: PUBLISHED -> READING (get_ready) -> FREE (release, then the id into `free[w]`)

The slot-id pipes only say *which* slot changed; the state word in the slot header is the
truth. The learner never polls the data; it sleeps in poll(2) on one pipe shared by all
workers. Workers use `unilab.runtime.ring_writer.RingWriter`.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from unilab.runtime.chunk_spec import ChunkSpec, FieldSpec
from unilab.runtime.poison import fill_poison
from unilab.runtime.ring_layout import (
    H_GENERATION,
    H_STATE,
    H_WORKER,
    RingLayout,
    RingParams,
    SlotHeader,
    SlotState,
    map_ring,
    read_header,
)
from unilab.runtime.shm import SegmentOwner
from unilab.runtime.slot_pipe import SlotPipe


@dataclass(frozen=True)
class RingHandle:
    """What one worker needs to attach: plain values plus its two pipe ends."""

    segment_name: str
    segment_size: int
    params: RingParams
    worker_id: int
    debug_poison: bool
    ready: SlotPipe  # write end, shared by all workers
    free: SlotPipe  # read end, this worker's only


class RingBuffer:
    """Learner side of the ring; implements `unilab.runtime.source.ChunkSource`.

    `debug_poison=True` makes workers re-poison a slot when they acquire it, so a worker that
    leaves part of a chunk unwritten shows poison even on reused slots (costs one memset).
    """

    def __init__(
        self,
        spec: ChunkSpec | Mapping[str, Any],
        num_workers: int,
        envs_per_worker: int | Sequence[int],
        chunk_len: int,
        slots_per_worker: int,
        *,
        owner: SegmentOwner | None = None,
        name: str = "ring",
        debug_poison: bool = False,
    ) -> None:
        spec = spec if isinstance(spec, ChunkSpec) else ChunkSpec(spec)
        self.params = RingParams.build(
            spec, num_workers, envs_per_worker, chunk_len, slots_per_worker
        )
        self.layout = RingLayout(self.params)
        self.spec: ChunkSpec = self.layout.spec
        self.debug_poison = debug_poison
        self._owns_owner = owner is None
        self.owner = owner if owner is not None else SegmentOwner()
        # Writing the poison over everything is also the pre-fault of every page.
        self.segment = self.owner.create(name, self.layout.total_bytes, prefault=False)
        self._headers, self._views = map_ring(self.segment, self.layout)
        self._headers[:] = 0
        for slot, views in enumerate(self._views):
            for array in views.values():
                fill_poison(array)
            self._headers[slot, H_STATE] = SlotState.FREE
            self._headers[slot, H_WORKER] = self.layout.worker_of(slot)
            self._headers[slot, H_GENERATION] = -1
        self._ready = SlotPipe()
        self._free = [SlotPipe() for _ in range(num_workers)]
        self._pending: collections.deque[int] = collections.deque()
        self._received_from = [0] * num_workers
        self._closed = False
        self._stats = {
            "chunks_received": 0,
            "chunks_released": 0,
            "discarded_unpublished": 0,
            "recovered_published": 0,
            "ignored_ids": 0,
        }

    # -- shape -------------------------------------------------------------------------

    @property
    def num_workers(self) -> int:
        return self.params.num_workers

    @property
    def num_slots(self) -> int:
        return self.params.num_slots

    @property
    def chunk_len(self) -> int:
        return self.params.chunk_len

    @property
    def envs_per_worker(self) -> tuple[int, ...]:
        return self.params.envs_per_worker

    def field(self, name: str) -> FieldSpec:
        return self.spec[name]

    def worker_of(self, slot: int) -> int:
        return self.layout.worker_of(slot)

    def handle(self, worker_id: int) -> RingHandle:
        """Attach data for worker `worker_id`; pass it to the worker process at start."""
        if not 0 <= worker_id < self.num_workers:
            raise ValueError(f"worker_id must be in 0..{self.num_workers - 1}, got {worker_id}")
        return RingHandle(
            segment_name=self.segment.name,
            segment_size=self.segment.size,
            params=self.params,
            worker_id=worker_id,
            debug_poison=self.debug_poison,
            ready=SlotPipe(None, self._ready.write_fd),
            free=SlotPipe(self._free[worker_id].read_fd, None),
        )

    # -- learner API ---------------------------------------------------------------------

    def get_ready(self, timeout: float) -> list[int]:
        """Slots published since the last call, oldest first; [] after `timeout` seconds.

        Returned slots are READING: the learner owns them until `release`.
        """
        self._pending.extend(self._ready.drain())
        if not self._pending and timeout > 0 and self._ready.wait(timeout):
            self._pending.extend(self._ready.drain())
        out = []
        while self._pending:
            slot = self._pending.popleft()
            if (
                not 0 <= slot < self.num_slots
                or self._headers[slot, H_STATE] != SlotState.PUBLISHED
            ):
                self._stats["ignored_ids"] += 1
                continue
            self._headers[slot, H_STATE] = SlotState.READING
            self._received_from[self.layout.worker_of(slot)] += 1
            out.append(slot)
        self._stats["chunks_received"] += len(out)
        return out

    def header(self, slot: int) -> SlotHeader:
        return read_header(self._headers, self._check_slot(slot))

    def views(self, slot: int) -> dict[str, np.ndarray]:
        """Zero-copy (T, n_envs, *shape) arrays of a slot; valid until `release(slot)`."""
        return self._views[self._check_slot(slot)]

    def release(self, slot: int) -> None:
        """Hand a READING slot back to its worker."""
        self._check_slot(slot)
        if self._headers[slot, H_STATE] != SlotState.READING:
            state = SlotState(self._headers[slot, H_STATE]).name
            raise ValueError(f"release({slot}): slot is {state}, not READING (from get_ready)")
        self._headers[slot, H_STATE] = SlotState.FREE
        self._free[self.worker_of(slot)].send(slot)  # a full pipe only drops a wake-up hint
        self._stats["chunks_released"] += 1

    def discard_worker_slots(self, worker_id: int) -> int:
        """Clean up after a worker process that has exited (never call it for a live one).

        Unpublished (WRITING) slots go back to FREE and are counted as discarded; a slot the
        worker marked PUBLISHED but died before announcing is delivered. Returns the number
        discarded.
        """
        if not 0 <= worker_id < self.num_workers:
            raise ValueError(f"worker_id must be in 0..{self.num_workers - 1}, got {worker_id}")
        # Everything the dead worker announced is in the pipe by now; collect it first.
        self._pending.extend(self._ready.drain())
        announced = set(self._pending)
        discarded = 0
        for slot in self.layout.slots_of(worker_id):
            state = self._headers[slot, H_STATE]
            if state == SlotState.WRITING:
                self._headers[slot, H_STATE] = SlotState.FREE
                discarded += 1
            elif state == SlotState.PUBLISHED and slot not in announced:
                self._pending.append(slot)
                self._stats["recovered_published"] += 1
        self._stats["discarded_unpublished"] += discarded
        return discarded

    def delivered_by(self, worker_id: int) -> int:
        """Chunks worker `worker_id` has published so far (all its processes): those the
        learner took plus those waiting for it."""
        waiting = sum(
            1
            for slot in self.layout.slots_of(worker_id)
            if self._headers[slot, H_STATE] == SlotState.PUBLISHED
        )
        return self._received_from[worker_id] + waiting

    def slot_states(self) -> list[SlotState]:
        return [SlotState(int(s)) for s in self._headers[:, H_STATE]]

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def close(self) -> None:
        """Close the pipes and, when this ring made its own SegmentOwner, unlink the memory."""
        if self._closed:
            return
        self._closed = True
        self._ready.close()
        for pipe in self._free:
            pipe.close()
        if self._owns_owner:
            self.owner.unlink_all()

    def _check_slot(self, slot: int) -> int:
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"slot must be in 0..{self.num_slots - 1}, got {slot}")
        return slot
