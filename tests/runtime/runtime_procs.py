"""Child-process bodies and scripted scenarios for the runtime tests.

Run as a script (``python runtime_procs.py <scenario>``) so a test can read the scenario's
whole stderr (resource_tracker warnings) and exit code. Children are started with the
spawn method, so every function here is importable by name.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import numpy as np

from unilab.runtime.ring import RingBuffer
from unilab.runtime.shm import Segment, SegmentOwner, list_segments
from unilab.runtime.signals import StopSignal
from unilab.runtime.supervisor import Supervisor
from unilab.runtime.synthetic import check_chunk, synthetic_spec
from unilab.runtime.weights import WeightHandle, WeightStore, weights_checksum
from unilab.runtime.worker_base import WorkerContext


def attach_and_exit(name: str, size: int, mode: str, mark: int) -> None:
    """Attach, write `mark` into byte 0, then leave the way `mode` says."""
    seg = Segment.attach(name, size)
    seg.array(np.uint8, (size,), 0)[0] = mark
    if mode == "exception":
        raise RuntimeError("planned failure after attach")
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)


def lingering_worker(ctx: WorkerContext) -> None:
    """Returns at once, but process teardown waits for a non-daemon thread."""
    ctx.heartbeat()
    threading.Thread(target=time.sleep, args=(float(ctx.config["linger_s"]),)).start()


def weight_writer(handle: WeightHandle, stop: Event, result: Connection) -> None:
    """Publish at full speed until `stop`; every element equals its version number."""
    store = WeightStore.attach(handle, writer=True)
    params = np.empty(store.num_floats, np.float32)
    version = store.version
    while not stop.is_set():
        for _ in range(64):
            params.fill(version + 1)
            version = store.publish(params)
    result.send((version,))


def weight_reader(
    handle: WeightHandle, min_s: float, min_reads: int, max_s: float, result: Connection
) -> None:
    """Read for at least `min_s` and `min_reads` (at most `max_s`); count bad copies."""
    store = WeightStore.attach(handle)
    out = np.empty(store.num_floats, np.float32)
    reads = mixed = wrong_version = not_monotone = 0
    last = 0
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        if elapsed > max_s or (elapsed > min_s and reads >= min_reads):
            break
        got = store.read_if_newer(last, out, timeout=max_s)
        if got is None:
            continue
        version, arr = got
        reads += 1
        lo, hi = float(arr.min()), float(arr.max())
        mixed += lo != hi
        wrong_version += lo != version
        not_monotone += version <= last
        last = version
    result.send((reads, mixed, wrong_version, not_monotone, store.retries, last))


def weight_reader_unsynchronized(
    handle: WeightHandle, seconds: float, verify: bool, result: Connection
) -> None:
    """A reader for which the seqlock gives no protection, as on a weak memory model where
    the writer's data stores may land after its sequence stores: copy the buffer LATEST
    points to and take it (with `verify`, only when the checksum matches). Counts the
    accepted copies that mix two versions."""
    store = WeightStore.attach(handle)
    out = np.empty(store.num_floats, np.float32)
    control, buffers = store._control, store._buffers
    accepted = torn = rejected = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        b = int(control[0]) & 1
        out[:] = buffers[b]
        version, stored = int(control[3 + b]), int(control[5 + b])
        if verify and weights_checksum(version, out) != stored:
            rejected += 1
            continue
        accepted += 1
        torn += float(out.min()) != float(out.max()) or float(out[0]) != version
    result.send((accepted, torn, rejected))


def scenario_shm_ownership() -> dict[str, object]:
    """Workers attach and exit normally, by exception and by SIGKILL; the segment survives."""
    ctx = mp.get_context("spawn")
    owner = SegmentOwner()
    seg = owner.create("data", 1 << 20)
    report: dict[str, object] = {"prefix": owner.prefix}
    for mark, mode in enumerate(("normal", "exception", "sigkill"), start=1):
        proc = ctx.Process(target=attach_and_exit, args=(seg.name, seg.size, mode, mark))
        proc.start()
        proc.join(30)
        view = seg.array(np.uint8, (1,), 0)
        report[mode] = {
            "exitcode": proc.exitcode,
            "segment_exists": os.path.exists(f"/dev/shm/{seg.name}"),
            "child_wrote": int(view[0]) == mark,
        }
        del view
    report["before_unlink"] = list_segments(owner.prefix)
    owner.unlink_all()
    report["after_unlink"] = list_segments(owner.prefix)
    return report


def drop_owner_lock(owner: SegmentOwner) -> None:
    """Release what marks `owner` as alive (its mappings and lock descriptors) without
    unlinking: the segments then look like those of an owner that died."""
    for seg in owner._segments:
        seg.close()
    owner._segments.clear()
    while owner._lock_fds:
        os.close(owner._lock_fds.pop())


def hold_segments(prefix: str | None, ready: Connection, release: Event) -> None:
    """Create two segments (under `prefix` when given), report their names, hold them
    (alive, owner lock held) until `release`, then exit without unlinking."""
    owner = SegmentOwner(prefix)
    names = [owner.create(p, 4096).name for p in ("ring", "ctl")]
    ready.send(names)
    release.wait(60)
    os._exit(0)  # no cleanup: like a crash, but only after the test let go


def scenario_setup_window() -> None:
    """Segments exist, no SIGTERM handler installed yet (a learner still setting up)."""
    owner = SegmentOwner()
    names = [owner.create(p, 4096).name for p in ("ring", "weights")]
    print("CREATED " + json.dumps(names), flush=True)
    time.sleep(60)


def scenario_main(argv: list[str]) -> int:
    """A learner main loop: Supervisor + signal handlers; prints READY, runs until a signal."""
    stop = StopSignal.install()
    owner = SegmentOwner()
    ring = RingBuffer(synthetic_spec(), 2, 3, 4, 2, owner=owner, debug_poison=True)
    sup = Supervisor(
        "unilab.runtime.synthetic:synthetic_worker_main",
        2,
        ring=ring,
        config={"step_sleep_s": 0.002},
        hang_timeout_s=5.0,
    ).start()
    print("STARTED " + json.dumps({"prefix": owner.prefix, "pids": sup.pids()}), flush=True)
    chunks = problems = 0
    announced = False
    try:
        while not stop:
            sup.poll()
            for slot in ring.get_ready(0.05):
                problems += len(check_chunk(ring.header(slot), ring.views(slot)))
                ring.release(slot)
                chunks += 1
            if chunks >= 4 and not announced:
                ready = {"prefix": owner.prefix, "pids": sup.pids(), "segments": owner.names}
                print("READY " + json.dumps(ready), flush=True)
                announced = True
        print(f"final checkpoint: {chunks} chunks, {problems} problems", flush=True)
    finally:
        sup.shutdown()
    return stop.exit_code


def scenario_stuck(argv: list[str]) -> int:
    """A learner whose update gets stuck after the first chunks (argv: mode escalate_s
    deadline_s stall_s). mode `python`: a loop that never checks the stop flag; mode `c`:
    the main thread never returns to the interpreter (signals blocked, like a C call)."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(processName)s %(message)s")
    mode, escalate, deadline, stall = argv[0], float(argv[1]), float(argv[2]), float(argv[3])
    stop = StopSignal.install()
    owner = SegmentOwner()
    ring = RingBuffer(synthetic_spec(), 2, 3, 4, 2, owner=owner)
    sup = Supervisor(
        "unilab.runtime.synthetic:synthetic_worker_main",
        2,
        ring=ring,
        config={"step_sleep_s": 0.002},
        hang_timeout_s=5.0,
        learner_stall_s=stall,
        stop_escalate_s=escalate,
        stop_deadline_s=deadline,
    ).start()
    chunks = 0
    try:
        while not stop and chunks < 4:
            sup.poll()
            for slot in ring.get_ready(0.05):
                ring.release(slot)
                chunks += 1
        info = {"prefix": owner.prefix, "pids": sup.pids(), "segments": owner.names}
        print("READY " + json.dumps(info), flush=True)
        if mode == "c":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            time.sleep(120)
        else:
            while True:  # a stuck update: never looks at `stop`
                time.sleep(0.01)
    finally:
        print("finally: shutting down", flush=True)
        sup.shutdown()
    return stop.exit_code


if __name__ == "__main__":
    name = sys.argv[1]
    if name == "shm-ownership":
        print(json.dumps(scenario_shm_ownership()))
    elif name == "main":
        sys.exit(scenario_main(sys.argv[2:]))
    elif name == "setup-window":
        scenario_setup_window()
    elif name == "stuck":
        sys.exit(scenario_stuck(sys.argv[2:]))
    else:
        raise SystemExit(
            f"unknown scenario {name!r}; known: shm-ownership, main, setup-window, stuck"
        )
