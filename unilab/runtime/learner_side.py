"""The learner's side of the loop: owns shared memory and workers, turns chunks into batches.

`LearnerRuntime.next_batch()` waits (with a timeout, watching the workers) for enough
chunks, copies each into a staging buffer at its env offset and hands its slot straight
back, then moves the batch to the learner device (pinned memory and a non-blocking copy on
CUDA). In sync mode a batch is one chunk from every worker made by the current policy; in
async mode it is the next `num_workers` chunks, with chunks older than `max_staleness`
policy versions dropped and counted.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from unilab.algos.base import FieldSpecs
from unilab.config.schema import Config
from unilab.runtime.chunk_check import ChunkCheck
from unilab.runtime.ring import RingBuffer
from unilab.runtime.shm import SegmentOwner
from unilab.runtime.supervisor import Supervisor, WorkerEvent, WorkersFailing
from unilab.runtime.weights import WeightStore
from unilab.runtime.worker_stats import WorkerStats

_POLL_S = 0.02


class RuntimeStalled(RuntimeError):
    """No chunk arrived within runtime.wait_timeout_s."""


# A worker that fails this many times in a row without delivering a chunk stops the run
# (a bad task config fails the same way every time; a SIGKILLed worker does not).
MAX_FAILURES_WITHOUT_CHUNK = 3


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor]
    """Field -> (T, B * n_envs, ...) on the learner device."""
    policy_versions: list[int]
    staleness: list[int]
    env_steps: int
    dropped_stale: int = 0
    events: list[WorkerEvent] = field(default_factory=list)


class LearnerRuntime:
    def __init__(
        self,
        cfg: Config,
        config_yaml: str,
        fields: FieldSpecs,
        actor_floats: int,
        device: torch.device,
        state_dir: Path | None = None,
        save_state_every: int = 0,
        restore_chunk: int | None = None,
    ) -> None:
        rt = cfg.runtime
        self.cfg = cfg
        self.device = device
        self.num_workers = rt.num_workers
        self.envs_per_worker = cfg.sim.num_envs // rt.num_workers
        self.sync = rt.mode == "sync"
        self.max_staleness = int(cfg.algo.max_staleness)
        self.wait_timeout_s = rt.wait_timeout_s
        self.owner = SegmentOwner()
        spec = {name: (shape, np.dtype(dtype)) for name, (shape, dtype) in fields.items()}
        self.ring = RingBuffer(
            spec,
            rt.num_workers,
            self.envs_per_worker,
            rt.chunk_len,
            rt.slots_per_worker,
            owner=self.owner,
            debug_poison=rt.debug_poison,
        )
        self.chunk_check = ChunkCheck(rt.num_workers, self.ring.worker_of)
        self.weights = WeightStore.create(self.owner, actor_floats)
        self.stats = WorkerStats.create(self.owner, rt.num_workers)
        worker_config = {
            "config_yaml": config_yaml,
            "stats": {
                "segment_name": self.stats.handle().segment_name,
                "segment_size": self.stats.handle().segment_size,
                "num_workers": rt.num_workers,
            },
            "state_dir": str(state_dir) if state_dir else None,
            "save_state_every": save_state_every,
            "restore_chunk": restore_chunk,
            # the cores this run may use, taken before anyone pins (runtime.pin_cpus)
            "cores": sorted(os.sched_getaffinity(0)),
        }
        self.supervisor = Supervisor(
            "unilab.runtime.sim_worker:sim_worker_main",
            rt.num_workers,
            owner=self.owner,
            ring=self.ring,
            weights=self.weights,
            config=worker_config,
            seed=cfg.run.seed,
            hang_timeout_s=rt.hang_timeout_s,
        )
        batch_envs = self.envs_per_worker * rt.num_workers
        pin = device.type == "cuda"
        self._staging = {
            name: torch.empty(
                (rt.chunk_len, batch_envs, *shape), dtype=_torch_dtype(dtype), pin_memory=pin
            )
            for name, (shape, dtype) in fields.items()
        }
        self._staging_np = {name: t.numpy() for name, t in self._staging.items()}
        self.version = 0
        self.counts: Counter[str] = Counter()
        self.staleness_hist: Counter[int] = Counter()
        self.learner_wait_s = 0.0
        self._failures_without_chunk = [0] * rt.num_workers

    def start(self) -> LearnerRuntime:
        self.supervisor.start()
        return self

    def publish(self, flat: np.ndarray) -> int:
        self.version = self.weights.publish(flat)
        return self.version

    def next_batch(self) -> Batch:
        need = self.num_workers
        taken: list[tuple[int, int]] = []  # (policy_version, worker) per batch column block
        have_worker: set[int] = set()
        dropped = 0
        events: list[WorkerEvent] = []
        deadline = time.monotonic() + self.wait_timeout_s
        t0 = time.perf_counter()
        while len(taken) < need:
            new_events = self.supervisor.poll()
            events.extend(new_events)
            self._check_failing(new_events)
            ready = self.ring.get_ready(timeout=_POLL_S)
            if not ready and time.monotonic() > deadline:
                raise RuntimeStalled(
                    f"no chunk from the workers for {self.wait_timeout_s:.0f} s "
                    f"(runtime.wait_timeout_s); worker errors: {self.supervisor.errors[-1:] or 'none'}"
                )
            for slot in ready:
                header = self.ring.header(slot)
                if not self.chunk_check.accept(slot, header, self.ring.views(slot), self.version):
                    self.ring.release(slot)  # never learned from; counted in chunk_check
                    continue
                self._failures_without_chunk[header.worker_id] = 0
                staleness = self.version - header.policy_version
                if self.sync:
                    keep = staleness == 0 and header.worker_id not in have_worker
                else:
                    keep = staleness <= self.max_staleness
                if keep and len(taken) < need:
                    # Sync: a fixed column block per worker, so batches (and results) do
                    # not depend on which worker finished first.
                    block = header.worker_id if self.sync else len(taken)
                    self._copy_in(slot, block)
                    taken.append((header.policy_version, header.worker_id))
                    have_worker.add(header.worker_id)
                    self.staleness_hist[staleness] += 1
                else:
                    dropped += 1
                self.ring.release(slot)
            if ready:
                deadline = time.monotonic() + self.wait_timeout_s
        self.learner_wait_s += time.perf_counter() - t0
        self.counts["dropped_stale"] += dropped
        tensors = {
            name: t.to(self.device, non_blocking=True) if self.device.type != "cpu" else t
            for name, t in self._staging.items()
        }
        versions = [v for v, _ in taken]
        return Batch(
            tensors=tensors,
            policy_versions=versions,
            staleness=[self.version - v for v in versions],
            env_steps=need * self.envs_per_worker * self.ring.chunk_len,
            dropped_stale=dropped,
            events=events,
        )

    def _check_failing(self, events: list[WorkerEvent]) -> None:
        for event in events:
            if event.kind in ("died", "error"):
                if event.kind == "died":
                    self._failures_without_chunk[event.worker_id] += 1
                if self._failures_without_chunk[event.worker_id] >= MAX_FAILURES_WITHOUT_CHUNK:
                    last = (
                        self.supervisor.errors[-1] if self.supervisor.errors else "(no traceback)"
                    )
                    raise WorkersFailing(
                        f"worker {event.worker_id} failed {MAX_FAILURES_WITHOUT_CHUNK} times "
                        f"without delivering a chunk; last error:\n{last}"
                    )

    def _copy_in(self, slot: int, block: int) -> None:
        lo = block * self.envs_per_worker
        hi = lo + self.envs_per_worker
        for name, array in self.ring.views(slot).items():
            np.copyto(self._staging_np[name][:, lo:hi], array)

    def close(self) -> None:
        self.supervisor.shutdown()
        self.owner.unlink_all()


def _torch_dtype(dtype: str) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype
