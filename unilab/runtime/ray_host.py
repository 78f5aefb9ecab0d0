"""One rollout host: the local worker processes and ring of a machine, as a Ray actor.

`unilab.runtime.ray_source` wraps this class with `ray.remote`; it imports no Ray itself.
`start` builds what a single-box run builds (ring, weight store, stats, a `Supervisor`
running `worker_target` processes), `set_weights` publishes a learner version into the
host's weight store under the learner's number, and `pull` hands back up to `max_chunks`
published chunks as plain numpy arrays (copied out of the ring, whose slots go straight
back to the workers): a (k, 6) int64 header array and, per field, a (k, T, n_envs, ...)
array. Only numpy arrays and numbers cross: Ray stores them in its object store (zero-copy
reads on the learner's node).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from unilab.runtime.chunk_spec import ChunkSpec, PlainSpec
from unilab.runtime.ring import RingBuffer
from unilab.runtime.shm import SegmentOwner
from unilab.runtime.supervisor import Supervisor
from unilab.runtime.weights import WeightStore
from unilab.runtime.worker_stats import WorkerStats

HEADER_COLUMNS = ("worker_id", "generation", "seq", "policy_version", "step_count", "publish_ns")
"""Columns of a pull's header array (worker_id and generation are the host's own)."""


class RolloutHost:
    def __init__(self) -> None:
        self._supervisor: Supervisor | None = None
        self._owner = SegmentOwner()

    def start(
        self,
        spec: PlainSpec,
        num_workers: int,
        envs_per_worker: int,
        chunk_len: int,
        slots_per_worker: int,
        actor_floats: int,
        worker_target: str,
        worker_config: dict[str, Any],
        seed: int,
        hang_timeout_s: float,
    ) -> int:
        """Build the ring and start the workers (once per actor incarnation); returns pid."""
        if self._supervisor is not None:
            return os.getpid()
        self._ring = RingBuffer(
            ChunkSpec.from_plain(spec),
            num_workers,
            envs_per_worker,
            chunk_len,
            slots_per_worker,
            owner=self._owner,
        )
        self._weights = WeightStore.create(self._owner, actor_floats)
        self._stats = WorkerStats.create(self._owner, num_workers)
        config = dict(worker_config)
        config["stats"] = {
            "segment_name": self._stats.handle().segment_name,
            "segment_size": self._stats.handle().segment_size,
            "num_workers": num_workers,
        }
        config["cores"] = sorted(os.sched_getaffinity(0))
        self._spec = self._ring.spec
        self._supervisor = Supervisor(
            worker_target,
            num_workers,
            owner=self._owner,
            ring=self._ring,
            weights=self._weights,
            config=config,
            seed=seed,
            hang_timeout_s=hang_timeout_s,
        )
        self._supervisor.start()
        return os.getpid()

    def set_weights(self, flat: np.ndarray, version: int) -> None:
        assert self._supervisor is not None, "start() first"
        if version > self._weights.version:
            self._weights.publish(np.asarray(flat, np.float32), version=version)

    def pull(self, timeout_s: float) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, float]]:
        """Every published chunk (waiting at most `timeout_s` for the first), and the
        supervisor's and workers' counters."""
        assert self._supervisor is not None, "start() first"
        self._supervisor.poll()
        keep = self._ring.get_ready(timeout_s)
        header = np.empty((len(keep), len(HEADER_COLUMNS)), np.int64)
        fields = {
            name: np.empty(
                (len(keep), self._ring.chunk_len, self._ring.envs_per_worker[0], *f.shape),
                f.dtype,
            )
            for name, f in self._spec.items()
        }
        for i, slot in enumerate(keep):
            h = self._ring.header(slot)
            header[i] = (
                h.worker_id,
                h.generation,
                h.seq,
                h.policy_version,
                h.step_count,
                h.publish_ns,
            )
            for name, view in self._ring.views(slot).items():
                fields[name][i] = view
            self._ring.release(slot)
        counters = {k: float(v) for k, v in self._supervisor.stats().items()}
        counters.update({f"workers_{k}": float(v) for k, v in self._stats.totals().items()})
        return header, fields, counters

    def close(self) -> None:
        if self._supervisor is not None:
            self._supervisor.shutdown()
            self._supervisor = None
        self._owner.unlink_all()
