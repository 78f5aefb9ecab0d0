"""The learner's side of the loop: owns shared memory and workers, turns chunks into batches.

`LearnerRuntime.next_batch()` waits (with a timeout, watching the workers) for enough
chunks, copies each into a staging buffer at its env offset and hands its slot straight
back, then moves the batch to the learner device (pinned memory and a non-blocking copy on
CUDA). In sync mode a batch is one chunk from every worker made by the current policy; in
async mode it is the next `num_workers` chunks, with chunks older than `max_staleness`
policy versions dropped and counted.

Chunks come from `source`. By default that is a shared-memory `RingBuffer` built here,
written by `runtime.num_workers` local worker processes that a `Supervisor` runs; they run
`worker_target` ("module:function"; the train layer's `unilab.train.sim_worker:sim_worker_main`
composes task and policy). A `ChunkSource` passed in instead (e.g. Ray actors on other
hosts) brings its own producers: no local worker starts, supervisor events are empty, and
its `close()` (if any) runs at `close()`. The source's slots must be laid out as the
default ring's (`num_workers` blocks of envs_per_worker envs, `chunk_len` steps).

Before any memory is made, the ring's size is computed, said through `notify` (default:
one line on stderr) and checked against `runtime.max_ring_mb` (a `ConfigError` naming the
settings that shrink it): camera images make rings large.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from unilab.config.schema import Config
from unilab.runtime.chunk_check import ChunkCheck
from unilab.runtime.fields import FieldSpecs
from unilab.runtime.ring import RingBuffer
from unilab.runtime.ring_size import check_ring_size, ring_size
from unilab.runtime.shm import SegmentOwner
from unilab.runtime.source import ChunkSource
from unilab.runtime.supervisor import Supervisor, WorkerEvent
from unilab.runtime.weights import WeightStore
from unilab.runtime.worker_stats import WorkerStats

_POLL_S = 0.02


class RuntimeStalled(RuntimeError):
    """No chunk arrived within runtime.wait_timeout_s."""


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
        restore_iteration: int | None = None,
        *,
        iteration_offset: int = 0,
        worker_target: str,
        source: ChunkSource | None = None,
        notify: Callable[[str], None] | None = None,
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
        self.local_workers = source is None
        self.ring_size = ring_size(
            spec, rt.num_workers, self.envs_per_worker, rt.chunk_len, rt.slots_per_worker
        )
        """The shared-memory ring's size (said at start, bounded by runtime.max_ring_mb)."""
        if source is None:
            check_ring_size(
                self.ring_size,
                rt.max_ring_mb,
                "runtime.max_ring_mb",
                "sim.num_envs, runtime.chunk_len, runtime.slots_per_worker or the image size",
            )
            say = notify or (lambda text: print(text, file=sys.stderr))
            say(f"{self.ring_size.describe()} (runtime.max_ring_mb={rt.max_ring_mb:g})")
            source = RingBuffer(
                spec,
                rt.num_workers,
                self.envs_per_worker,
                rt.chunk_len,
                rt.slots_per_worker,
                owner=self.owner,
                debug_poison=rt.debug_poison,
            )
        self.source: ChunkSource = source
        """Where chunks come from; the learner reads nothing else."""
        self.chunk_len = int(rt.chunk_len)
        self.chunk_check = ChunkCheck(
            rt.num_workers, source.worker_of if isinstance(source, RingBuffer) else None
        )
        """Header and finiteness check of every chunk before it can reach an update."""
        self.weights = WeightStore.create(self.owner, actor_floats)
        self.stats = WorkerStats.create(self.owner, rt.num_workers)
        # the cores this run may use, taken before anyone pins (runtime.pin_cpus)
        self.cores = sorted(os.sched_getaffinity(0))
        worker_config = {
            "config_yaml": config_yaml,
            "stats": {
                "segment_name": self.stats.handle().segment_name,
                "segment_size": self.stats.handle().segment_size,
                "num_workers": rt.num_workers,
            },
            "state_dir": str(state_dir) if state_dir else None,
            "save_state_every": save_state_every,
            # sync mode: worker states are keyed by learner iteration (offset + version)
            "iteration_offset": iteration_offset,
            "restore_iteration": restore_iteration,
            "cores": self.cores,
        }
        self.supervisor: Supervisor | None = None
        """Runs the local workers; None when an injected source brings its own producers."""
        if self.local_workers:
            self.supervisor = Supervisor(
                worker_target,
                rt.num_workers,
                owner=self.owner,
                ring=source if isinstance(source, RingBuffer) else None,
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
        self.host_batch: dict[str, np.ndarray] = {
            name: t.numpy() for name, t in self._staging.items()
        }
        """The last batch on the host, field -> (T, B * n_envs, ...) numpy (the staging memory:
        valid until the next `next_batch`). Recorders and logging read it."""
        self.version = 0
        self.counts: Counter[str] = Counter()
        self.staleness_hist: Counter[int] = Counter()
        self.learner_wait_s = 0.0

    def start(self) -> LearnerRuntime:
        if self.supervisor is not None:
            self.supervisor.start()
        return self

    def supervisor_stats(self) -> dict[str, int]:
        """Deaths, hangs, restarts, ... of the local workers ({} without them)."""
        if self.supervisor is not None:
            return dict(self.supervisor.stats())
        remote = getattr(self.source, "supervisor_stats", None)  # e.g. Ray hosts
        return dict(remote()) if callable(remote) else {}

    def _worker_steps(self) -> int:
        """The local workers' env steps so far; -1 without local workers (a remote source
        reports no progress: only its chunks reset the stall deadline)."""
        return self.supervisor.steps_total() if self.supervisor is not None else -1

    def _errors(self) -> list[str]:
        return self.supervisor.errors if self.supervisor is not None else []

    def publish(self, flat: np.ndarray) -> int:
        self.version = self.weights.publish(flat)
        # A remote source (Ray hosts) ships the weights to its own workers.
        ship = getattr(self.source, "publish_weights", None)
        if callable(ship):
            ship(flat, self.version)
        return self.version

    def next_batch(self) -> Batch:
        need = self.num_workers
        taken: list[tuple[int, int]] = []  # (policy_version, worker) per batch column block
        have_worker: set[int] = set()
        dropped = 0
        events: list[WorkerEvent] = []
        deadline = time.monotonic() + self.wait_timeout_s
        progress = self._worker_steps()
        t0 = time.perf_counter()
        while len(taken) < need:
            new_events = self.supervisor.poll() if self.supervisor is not None else []
            events.extend(new_events)
            ready = self.source.get_ready(timeout=_POLL_S)
            if not ready and time.monotonic() > deadline:
                # Workers still stepping toward their chunks are slow (an oversubscribed
                # box, a long chunk), not stalled: wait another period.
                if (now_steps := self._worker_steps()) != progress:
                    progress = now_steps
                    deadline = time.monotonic() + self.wait_timeout_s
                    continue
                raise RuntimeStalled(
                    f"no chunk and no env step from the workers for "
                    f"{self.wait_timeout_s:.0f} s (runtime.wait_timeout_s); "
                    f"worker errors: {self._errors()[-1:] or 'none'}"
                )
            for slot in ready:
                header = self.source.header(slot)
                if not self.chunk_check.accept(slot, header, self.source.views(slot), self.version):
                    self.source.release(slot)  # never learned from; counted in chunk_check
                    continue
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
                self.source.release(slot)
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
            env_steps=need * self.envs_per_worker * self.chunk_len,
            dropped_stale=dropped,
            events=events,
        )

    def _copy_in(self, slot: int, block: int) -> None:
        lo = block * self.envs_per_worker
        hi = lo + self.envs_per_worker
        for name, array in self.source.views(slot).items():
            np.copyto(self.host_batch[name][:, lo:hi], array)

    def close(self) -> None:
        if self.supervisor is not None:
            self.supervisor.shutdown()  # closes the ring it runs
        else:
            close = getattr(self.source, "close", None)
            if callable(close):
                close()
        self.owner.unlink_all()


def _torch_dtype(dtype: str) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype
