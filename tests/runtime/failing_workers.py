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
