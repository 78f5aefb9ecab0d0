"""Chunks from rollout hosts that are Ray actors (`runtime.backend=ray`; docs/decisions/0071).

Each host (`unilab.runtime.ray_host.RolloutHost`) runs `num_workers / hosts` worker
processes and a ring of its own. The learner keeps one `pull` call in flight per host and
collects whichever returns first; chunks arrive as numpy arrays, are checked against the
spec, and become slots of this source with global worker ids (host h's worker w is
`h * workers_per_host + w`), so the layout is the single-box ring's. Weights go to every
host with the learner's version (`publish_weights`, one object put once, shared by all).

A host that dies (its process or node lost) makes its call fail; Ray restarts the actor
(`ray.max_restarts`), the source counts the loss, starts the host again with the newest
weights and tags its chunks with a new generation (1000 per host incarnation), so the
learner's chunk check treats the new workers as replacements. Staleness and policy versions
work as on one box: every chunk carries the version that made it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from unilab.runtime.chunk_spec import ChunkSpec
from unilab.runtime.ray_host import HEADER_COLUMNS, RolloutHost
from unilab.runtime.ring_layout import SlotHeader, SlotState

GENERATIONS_PER_INCARNATION = 1000
_RETRY_S = 0.5


class RayNotInstalled(RuntimeError):
    pass


@dataclass(frozen=True)
class HostPlan:
    """What every host starts from (plain values: they cross to the actors)."""

    hosts: int
    workers_per_host: int
    envs_per_worker: int
    chunk_len: int
    slots_per_worker: int
    actor_floats: int
    worker_target: str
    worker_config: dict[str, Any]
    seed: int
    hang_timeout_s: float


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayNotInstalled(
            "runtime.backend=ray needs Ray: pip install -e '.[ray]' (or `make install-ray`)"
        ) from None
    return ray


class RayChunkSource:
    """A `ChunkSource` over Ray rollout hosts."""

    def __init__(
        self,
        spec: ChunkSpec,
        plan: HostPlan,
        *,
        address: str = "",
        num_cpus_per_host: float = 1.0,
        max_restarts: int = -1,
        pull_timeout_s: float = 0.05,
        object_store_mb: int = 256,
    ) -> None:
        ray = import_ray()
        self._ray = ray
        self.spec = spec
        self.plan = plan
        self.pull_timeout_s = pull_timeout_s
        if not ray.is_initialized():
            if address:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(
                    num_cpus=max(1, int(plan.hosts * num_cpus_per_host)),
                    object_store_memory=object_store_mb * 2**20,
                    include_dashboard=False,
                    log_to_driver=False,
                )
        actor = ray.remote(RolloutHost).options(
            num_cpus=num_cpus_per_host,
            max_restarts=max_restarts,
            scheduling_strategy="SPREAD",
        )
        self.hosts = [actor.remote() for _ in range(plan.hosts)]
        self.incarnation = [0] * plan.hosts
        self._alive = [False] * plan.hosts
        self._pending: dict[Any, int] = {}  # pull ref -> host
        self._retry_at: dict[int, float] = {}
        self._weights: tuple[Any, int] | None = None  # (object ref, version)
        self._chunks: dict[int, tuple[SlotHeader, dict[str, np.ndarray]]] = {}
        self._next_id = 0
        self.host_counters: list[dict[str, float]] = [{} for _ in range(plan.hosts)]
        self._stats = {"chunks_received": 0, "chunks_released": 0, "hosts_lost": 0,
                       "hosts_restarted": 0, "host_calls_failed": 0, "bad_chunks": 0}  # fmt: skip
        self.pids = ray.get([self._start(h) for h in range(plan.hosts)])
        for h in range(plan.hosts):
            self._pull(h)

    # -- hosts -------------------------------------------------------------------------------
    def _start(self, h: int) -> Any:
        p = self.plan
        # Seeds as on one box (worker w: seed + w), moved on per host incarnation.
        seed = p.seed + h * p.workers_per_host + self.incarnation[h] * 100_003
        ref = self.hosts[h].start.remote(
            self.spec.to_plain(),
            p.workers_per_host,
            p.envs_per_worker,
            p.chunk_len,
            p.slots_per_worker,
            p.actor_floats,
            p.worker_target,
            p.worker_config,
            seed,
            p.hang_timeout_s,
        )
        if self._weights is not None:
            self.hosts[h].set_weights.remote(*self._weights)
        return ref

    def _pull(self, h: int) -> None:
        self._pending[self.hosts[h].pull.remote(self.pull_timeout_s)] = h

    def _lost(self, h: int) -> None:
        """A call to host h failed: count a loss once per incarnation, start it again."""
        self._stats["host_calls_failed"] += 1
        if self._alive[h]:
            self._stats["hosts_lost"] += 1
            self.incarnation[h] += 1
            self._alive[h] = False
        self._retry_at[h] = time.monotonic() + _RETRY_S

    def publish_weights(self, flat: np.ndarray, version: int) -> None:
        self._weights = (self._ray.put(np.ascontiguousarray(flat, np.float32)), version)
        for host in self.hosts:
            host.set_weights.remote(*self._weights)

    # -- ChunkSource -------------------------------------------------------------------------
    def get_ready(self, timeout: float) -> list[int]:
        ray = self._ray
        now = time.monotonic()
        for h, at in list(self._retry_at.items()):
            if now >= at:
                del self._retry_at[h]
                self._start(h)
                self._pull(h)
        refs = list(self._pending)
        if not refs:
            time.sleep(timeout)
            return []
        done, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if done:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        out: list[int] = []
        for ref in done:
            h = self._pending.pop(ref)
            try:
                header, fields, counters = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                self._lost(h)
                continue
            if not self._alive[h] and self.incarnation[h] > 0:
                self._stats["hosts_restarted"] += 1  # a lost host delivers again
            self._alive[h] = True
            self.host_counters[h] = counters
            out.extend(self._take(h, header, fields))
            self._pull(h)
        self._stats["chunks_received"] += len(out)
        return out

    def _take(self, h: int, header: Any, fields: Any) -> list[int]:
        if not self._well_formed(header, fields):
            self._stats["bad_chunks"] += 1
            return []
        p = self.plan
        ids = []
        for i, row in enumerate(header.tolist()):
            values = dict(zip(HEADER_COLUMNS, row, strict=True))
            slot = self._next_id
            self._next_id += 1
            self._chunks[slot] = (
                SlotHeader(
                    slot=slot,
                    state=SlotState.READING,
                    worker_id=h * p.workers_per_host + values["worker_id"],
                    generation=values["generation"]
                    + self.incarnation[h] * GENERATIONS_PER_INCARNATION,
                    seq=values["seq"],
                    policy_version=values["policy_version"],
                    step_count=values["step_count"],
                    publish_ns=values["publish_ns"],
                ),
                {name: fields[name][i] for name in self.spec},
            )
            ids.append(slot)
        return ids

    def _well_formed(self, header: Any, fields: Any) -> bool:
        """Only arrays of the spec's dtypes and shapes are accepted from a host."""
        p = self.plan
        if not isinstance(header, np.ndarray) or header.dtype != np.int64 or header.ndim != 2:
            return False
        k = header.shape[0]
        if header.shape[1] != len(HEADER_COLUMNS) or not isinstance(fields, dict):
            return False
        if set(fields) != set(self.spec):
            return False
        for name, f in self.spec.items():
            a = fields[name]
            want = (k, p.chunk_len, p.envs_per_worker, *f.shape)
            if not isinstance(a, np.ndarray) or a.dtype != f.dtype or a.shape != want:
                return False
        ok = (header[:, 0] >= 0) & (header[:, 0] < p.workers_per_host)
        return bool(ok.all())

    def header(self, slot: int) -> SlotHeader:
        return self._chunks[slot][0]

    def views(self, slot: int) -> dict[str, np.ndarray]:
        return self._chunks[slot][1]

    def release(self, slot: int) -> None:
        del self._chunks[slot]
        self._stats["chunks_released"] += 1

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def supervisor_stats(self) -> dict[str, int]:
        """Hosts lost (and restarted by Ray) plus the hosts' own worker restarts."""
        totals = self.host_totals()
        out = {k: int(v) for k, v in totals.items() if not k.startswith("workers_")}
        out["hosts_lost"] = self._stats["hosts_lost"]
        out["hosts_restarted"] = self._stats["hosts_restarted"]
        return out

    def host_totals(self) -> dict[str, float]:
        """The hosts' supervisor and worker counters, summed."""
        total: dict[str, float] = {}
        for counters in self.host_counters:
            for k, v in counters.items():
                total[k] = total.get(k, 0.0) + v
        return total

    def close(self) -> None:
        ray = self._ray
        closing = [host.close.remote() for host in self.hosts]
        # a host already gone has nothing left to close
        with contextlib.suppress(Exception):
            ray.get(closing, timeout=20)
        for host in self.hosts:
            ray.kill(host, no_restart=True)
        self.hosts = []
