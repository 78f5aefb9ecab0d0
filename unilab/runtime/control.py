"""Run control in shared memory: a stop flag, the learner's heartbeat, and per worker a
heartbeat word and a count of the env steps it has stepped.

Plain words instead of multiprocessing Events or Locks: a worker SIGKILLed while holding a
multiprocessing lock would leave it held forever; a word in shared memory cannot be held.
Heartbeats are time.monotonic() values; CLOCK_MONOTONIC is system-wide, so the supervisor
can compare them with its own clock. The learner beats each time its loop polls the
supervisor; workers compare that beat with `learner_stall_s` to notice a learner that
stopped pulling chunks (a stuck update) and say so. The step counts tell the learner a
slow worker (still stepping toward its next chunk) from a stalled one (beating, not
stepping), which a heartbeat alone cannot: workers beat while they wait too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from unilab.runtime.shm import Segment, SegmentOwner

_HEADER_BYTES = 64
NOT_STARTED = 0.0  # heartbeat value before a worker's first beat
# A worker on its way out stores -time.monotonic(): interpreter teardown can outlast the
# hang timeout, and an exiting worker must not be mistaken for a hung one.


@dataclass(frozen=True)
class ControlHandle:
    segment_name: str
    segment_size: int
    num_workers: int


class ControlBlock:
    def __init__(self, segment: Segment, num_workers: int) -> None:
        self.num_workers = num_workers
        self._segment = segment
        self._flags = segment.array(np.int64, (8,), 0)
        # word 1: learner heartbeat, word 2: learner_stall_s (float64 in the header line)
        self._learner = segment.array(np.float64, (2,), 8)
        self._beats = segment.array(np.float64, (num_workers,), _HEADER_BYTES)
        self._steps = segment.array(np.int64, (num_workers,), _HEADER_BYTES + 8 * num_workers)

    @classmethod
    def create(cls, owner: SegmentOwner, num_workers: int, *, name: str = "ctl") -> ControlBlock:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        return cls(owner.create(name, _HEADER_BYTES + 16 * num_workers), num_workers)

    @classmethod
    def attach(cls, handle: ControlHandle) -> ControlBlock:
        return cls(Segment.attach(handle.segment_name, handle.segment_size), handle.num_workers)

    def handle(self) -> ControlHandle:
        return ControlHandle(self._segment.name, self._segment.size, self.num_workers)

    def request_stop(self) -> None:
        self._flags[0] = 1

    def stop_requested(self) -> bool:
        return bool(self._flags[0])

    def learner_beat(self) -> None:
        self._learner[0] = time.monotonic()

    def learner_last_beat(self) -> float:
        """time.monotonic() of the learner's last poll (0: not yet)."""
        return float(self._learner[0])

    def set_learner_stall_s(self, seconds: float) -> None:
        self._learner[1] = seconds

    @property
    def learner_stall_s(self) -> float:
        """Workers report a learner silent for longer than this (0: never)."""
        return float(self._learner[1])

    def beat(self, worker_id: int) -> None:
        self._beats[worker_id] = time.monotonic()

    def stepped(self, worker_id: int) -> None:
        """A heartbeat that also counts one step of the worker's envs (progress)."""
        self._beats[worker_id] = time.monotonic()
        self._steps[worker_id] += 1

    def steps_total(self) -> int:
        """Steps counted by `stepped`, all workers and their restarts together."""
        return int(self._steps.sum())

    def mark_exiting(self, worker_id: int) -> None:
        self._beats[worker_id] = -time.monotonic()

    def reset_beat(self, worker_id: int) -> None:
        self._beats[worker_id] = NOT_STARTED

    def last_beat(self, worker_id: int) -> float:
        return float(self._beats[worker_id])

    def close(self) -> None:
        self._segment.close()
