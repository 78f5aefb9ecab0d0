"""Worker bodies that fail in the ways the learner must notice, and a parent process for the
parent-death test (``python failing_workers.py parent``). Spawned children import this
module by name (its folder is on their sys.path)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from unilab.runtime.worker_base import WorkerContext


def failing_worker(ctx: WorkerContext) -> None:
    """Fails before delivering anything, every time (as a bad task config would)."""
    ctx.heartbeat()
    raise RuntimeError("planned failure: this worker cannot build its task")


def stalling_worker(ctx: WorkerContext) -> None:
    """Alive (heartbeating) but never publishes a chunk."""
    while True:
        ctx.check_stop()
        time.sleep(0.01)


def slow_worker(ctx: WorkerContext) -> None:
    """Steps toward its first chunk for about 3 s, counting each step (progress), then
    publishes it: slower than a short runtime.wait_timeout_s, but never stalled."""
    assert ctx.ring is not None and ctx.weights is not None
    got = None
    while got is None:  # the policy the chunk is made with
        ctx.heartbeat()
        got = ctx.weights.read_if_newer(0, None)
        time.sleep(0.01)
    slot = ctx.acquire_slot()
    views = ctx.ring.views(slot)
    chunk_len = ctx.ring.chunk_len
    for t in range(chunk_len):
        for _ in range(15):
            ctx.stepped()
            time.sleep(3.0 / chunk_len / 15)
        for view in views.values():
            view[t] = 0
    ctx.ring.publish(slot, 0, got[0], chunk_len * ctx.ring.n_envs)
    while not ctx.should_stop():
        ctx.heartbeat()
        time.sleep(0.01)


def sleeping_worker(ctx: WorkerContext) -> None:
    """Blocks without heartbeats, as a worker stuck in C code would: it cannot notice its
    parent's death by itself; only the kernel's parent-death signal ends it."""
    ctx.heartbeat()
    Path(ctx.config["asleep_file"]).write_text(str(os.getpid()))
    time.sleep(120)


def parent(asleep_file: str) -> int:
    """Start one sleeping worker; print its pid once it is asleep; wait to be killed."""
    from unilab.runtime.supervisor import Supervisor

    config = {"asleep_file": asleep_file}
    sup = Supervisor("failing_workers:sleeping_worker", 1, config=config, hang_timeout_s=300.0)
    sup.start()
    deadline = time.monotonic() + 60
    while not Path(asleep_file).is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    print("ASLEEP " + json.dumps(sup.pids()), flush=True)
    time.sleep(120)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "parent":
        raise SystemExit(parent(sys.argv[2]))
    raise SystemExit("usage: failing_workers.py parent ASLEEP_FILE")
