"""Per-worker counters in shared memory: where each worker's time went, and what it saw.

Each worker adds to its own row only (one writer per row, so no lock); the learner reads
all rows when it logs. Values are cumulative since the worker id started; a restarted
worker continues the row, so totals cover the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from unilab.runtime.shm import Segment, SegmentOwner

COLUMNS = (
    "sim_s",  # inside task.step (physics, observations, rewards, resets), rendering excluded
    "render_s",  # camera observations (inside task.step)
    "inference_s",  # actor forward passes
    "write_s",  # copying transitions into the ring slot and publishing
    "wait_s",  # waiting for a free slot or (sync mode) for new weights
    "env_steps",
    "chunks",
    "sim_unstable",  # envs reset because their physics diverged
    "weight_loads",
)
COL = {name: i for i, name in enumerate(COLUMNS)}


@dataclass(frozen=True)
class WorkerStatsHandle:
    segment_name: str
    segment_size: int
    num_workers: int


class WorkerStats:
    def __init__(self, segment: Segment, num_workers: int) -> None:
        self._segment = segment
        self.num_workers = num_workers
        self.table = segment.array(np.float64, (num_workers, len(COLUMNS)), 0)

    @classmethod
    def create(cls, owner: SegmentOwner, num_workers: int) -> WorkerStats:
        size = 8 * num_workers * len(COLUMNS)
        return cls(owner.create("stats", size), num_workers)

    @classmethod
    def attach(cls, handle: WorkerStatsHandle) -> WorkerStats:
        return cls(Segment.attach(handle.segment_name, handle.segment_size), handle.num_workers)

    def handle(self) -> WorkerStatsHandle:
        return WorkerStatsHandle(self._segment.name, self._segment.size, self.num_workers)

    def add(self, worker_id: int, **values: float) -> None:
        row = self.table[worker_id]
        for name, value in values.items():
            row[COL[name]] += value

    def totals(self) -> dict[str, float]:
        summed = self.table.sum(axis=0)
        return {name: float(summed[i]) for i, name in enumerate(COLUMNS)}
