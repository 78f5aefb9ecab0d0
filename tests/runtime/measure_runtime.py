"""Measurements for docs/decisions/0004 (not a test): hand-off latency and copy bandwidth.

    .venv/bin/python tests/runtime/measure_runtime.py

1. publish -> get_ready latency across processes, through the ring's slot-id pipe, and the
   same hand-off through an mp.Queue for comparison (idle learner blocked in its wait).
2. Bandwidth of writing a 1 MiB chunk into a ring slot: one slot (in cache), cycling a
   256 MiB ring, and the first touch of a segment that was not pre-faulted.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from multiprocessing.queues import Queue

import numpy as np

from unilab.runtime.ring import RingBuffer
from unilab.runtime.ring_writer import RingWriter
from unilab.runtime.shm import SegmentOwner
from unilab.runtime.supervisor import Supervisor
from unilab.runtime.worker_base import WorkerContext

GAP_S = 0.002  # between publishes, so the learner is asleep in poll(2) each time
COUNT = 1500


def latency_worker(ctx: WorkerContext) -> None:
    assert ctx.ring is not None
    sent = 0
    while not ctx.should_stop() and sent < COUNT:
        slot = ctx.acquire_slot()
        ctx.ring.views(slot)["x"][:] = 1.0
        ctx.ring.publish(slot)
        sent += 1
        if ctx.config["gap_s"]:
            time.sleep(ctx.config["gap_s"])


def queue_worker(q: Queue[int]) -> None:
    for _ in range(COUNT):
        q.put(time.monotonic_ns())
        time.sleep(GAP_S)


def percentiles(us: list[float]) -> dict[str, float]:
    a = np.asarray(us)
    return {
        p: round(float(np.percentile(a, q)), 1) for p, q in (("p50", 50), ("p90", 90), ("p99", 99))
    }


def ring_latency(gap_s: float = GAP_S) -> dict[str, float]:
    ring = RingBuffer({"x": ((4,), np.float32)}, 1, 1, chunk_len=1, slots_per_worker=8)
    lat: list[float] = []
    batches = 0
    config = {"gap_s": gap_s}
    with Supervisor(latency_worker, 1, ring=ring, hang_timeout_s=5.0, config=config) as sup:
        while len(lat) < 100:  # warm-up: the worker is starting
            sup.poll()
            for slot in ring.get_ready(timeout=0.1):
                lat.append(0.0)
                ring.release(slot)
        t0 = time.perf_counter()
        while len(lat) < COUNT:
            sup.poll()
            ready = ring.get_ready(timeout=0.1)
            batches += bool(ready)
            for slot in ready:
                lat.append((time.monotonic_ns() - ring.header(slot).publish_ns) / 1e3)
                ring.release(slot)
        elapsed = time.perf_counter() - t0
    out = percentiles(lat[100:])
    out["handoffs_per_s"] = round((COUNT - 100) / elapsed)
    out["chunks_per_get_ready"] = round((COUNT - 100) / max(batches, 1), 2)
    return out


def queue_latency() -> dict[str, float]:
    ctx = mp.get_context("spawn")
    q: Queue[int] = ctx.Queue()
    proc = ctx.Process(target=queue_worker, args=(q,))
    proc.start()
    lat = []
    for _ in range(COUNT):
        sent_ns = q.get(timeout=30)
        lat.append((time.monotonic_ns() - sent_ns) / 1e3)
    proc.join()
    return percentiles(lat[100:])


def copy_bandwidth() -> dict[str, float]:
    spec = {"x": ((128,), np.float32)}  # T=32 x 64 envs x 128 floats = 1 MiB per slot
    src = np.random.default_rng(0).random((32, 64, 128), dtype=np.float32)
    out = {}
    ring = RingBuffer(spec, 1, 64, chunk_len=32, slots_per_worker=4)
    writer = RingWriter(ring.handle(0))
    view = writer.views(writer.acquire_free_slot(1.0))["x"]
    reps = 2000
    t0 = time.perf_counter()
    for _ in range(reps):
        np.copyto(view, src)
    out["one_slot_GBps"] = round(reps * src.nbytes / (time.perf_counter() - t0) / 1e9, 1)
    ring.close()

    big = RingBuffer(spec, 64, 64, chunk_len=32, slots_per_worker=4)  # 256 slots: 256 MiB
    views = [big.views(s)["x"] for s in range(big.num_slots)]
    for v in views:  # one untimed pass
        np.copyto(v, src)
    t0 = time.perf_counter()
    for _ in range(4):
        for v in views:
            np.copyto(v, src)
    out["ring_256MiB_GBps"] = round(
        4 * len(views) * src.nbytes / (time.perf_counter() - t0) / 1e9, 1
    )
    big.close()

    owner = SegmentOwner()
    for prefault in (False, True):
        seg = owner.create(f"p{int(prefault)}", 256 << 20, prefault=prefault)
        arr = seg.array(np.float32, (256 * 32, 64, 128), 0)
        t0 = time.perf_counter()
        for i in range(256):
            np.copyto(arr[i * 32 : (i + 1) * 32], src)
        key = "prefaulted_first_pass_GBps" if prefault else "fresh_first_touch_GBps"
        out[key] = round(256 * src.nbytes / (time.perf_counter() - t0) / 1e9, 1)
        del arr
    t0 = time.perf_counter()
    owner.create("pf", 256 << 20, prefault=True)
    out["prefault_256MiB_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    owner.unlink_all()
    return out


if __name__ == "__main__":
    result = {
        "ring_pipe_latency_us": ring_latency(),
        "ring_pipe_burst": ring_latency(gap_s=0.0),
        "mp_queue_latency_us": queue_latency(),
        "copy_1MiB_chunk": copy_bandwidth(),
    }
    print(json.dumps(result, indent=2))
