"""The shared-memory ring buffer, worker side: take a free slot, fill it, publish it."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from unilab.runtime.poison import fill_poison
from unilab.runtime.ring import RingHandle
from unilab.runtime.ring_layout import (
    H_GENERATION,
    H_POLICY_VERSION,
    H_PUBLISH_NS,
    H_SEQ,
    H_STATE,
    H_STEP_COUNT,
    H_WORKER,
    RingLayout,
    SlotState,
    map_ring,
)
from unilab.runtime.shm import Segment


class RingWriter:
    """One worker's view of the ring. Never unlinks anything; the learner owns the memory."""

    def __init__(self, handle: RingHandle, generation: int = 0) -> None:
        self.worker_id = handle.worker_id
        self.generation = generation
        self.layout = RingLayout(handle.params)
        self.spec = self.layout.spec
        self.chunk_len = handle.params.chunk_len
        self.n_envs = handle.params.envs_per_worker[self.worker_id]
        self._debug_poison = handle.debug_poison
        self._segment = Segment.attach(handle.segment_name, handle.segment_size)
        self._headers, self._views = map_ring(self._segment, self.layout)
        self._ready = handle.ready
        self._free = handle.free
        self._own = list(self.layout.slots_of(self.worker_id))
        self._next = 0  # round-robin start, so slots are reused in order
        self._seq = 0

    def acquire_free_slot(
        self,
        timeout: float,
        *,
        on_wait: Callable[[], None] | None = None,
        wait_tick_s: float = 0.1,
    ) -> int:
        """A FREE slot of this worker, now WRITING. Raises TimeoutError after `timeout` s.

        While it waits it calls `on_wait` at least every `wait_tick_s` (heartbeats, stop
        checks; an exception raised there ends the wait).
        """
        deadline = time.monotonic() + timeout
        while True:
            self._free.drain()  # ids are only wake-ups; the state words decide
            slot = self._take_free()
            if slot is not None:
                return slot
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"worker {self.worker_id}: no free ring slot within {timeout:.3g} s "
                    "(the learner is not releasing slots)"
                )
            self._free.wait(min(wait_tick_s, remaining))
            if on_wait is not None:
                on_wait()

    def views(self, slot: int) -> dict[str, np.ndarray]:
        """Zero-copy (T, n_envs, *shape) arrays of a slot this worker holds."""
        self._check_own(slot)
        return self._views[slot]

    def publish(
        self,
        slot: int,
        seq: int | None = None,
        policy_version: int = 0,
        step_count: int = 0,
    ) -> int:
        """Mark a filled slot PUBLISHED and tell the learner; returns the sequence number.

        `seq` defaults to a per-writer counter (0, 1, 2, ...).
        """
        self._check_own(slot)
        if self._headers[slot, H_STATE] != SlotState.WRITING:
            raise ValueError(f"publish({slot}): slot was not acquired by this worker")
        if seq is None:
            seq = self._seq
        self._seq = seq + 1
        header = self._headers[slot]
        header[H_SEQ] = seq
        header[H_GENERATION] = self.generation
        header[H_POLICY_VERSION] = policy_version
        header[H_STEP_COUNT] = step_count
        header[H_PUBLISH_NS] = time.monotonic_ns()
        # Data and header stores above precede this state store, and the pipe write (a
        # syscall) follows it, so a learner that reads the id sees the whole chunk.
        header[H_STATE] = SlotState.PUBLISHED
        if not self._ready.send(slot):
            raise RuntimeError("ready pipe is full; more ids outstanding than slots exist")
        return seq

    def close(self) -> None:
        self._views = []
        self._segment.close()

    def _take_free(self) -> int | None:
        k = len(self._own)
        for i in range(k):
            slot = self._own[(self._next + i) % k]
            if self._headers[slot, H_STATE] == SlotState.FREE:
                self._next = (self._next + i + 1) % k
                if self._debug_poison:
                    for array in self._views[slot].values():
                        fill_poison(array)
                header = self._headers[slot]
                header[H_WORKER] = self.worker_id
                header[H_GENERATION] = self.generation
                header[H_SEQ] = -1
                header[H_STATE] = SlotState.WRITING
                return slot
        return None

    def _check_own(self, slot: int) -> None:
        if slot not in self._own:
            raise ValueError(
                f"slot {slot} does not belong to worker {self.worker_id} (owns {self._own})"
            )
