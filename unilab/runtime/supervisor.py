"""Starts, watches, replaces and stops worker processes.

The learner calls `poll()` from its loop (cheap: it returns at once unless `poll_interval_s`
passed). A worker that exited abnormally, or whose heartbeat is older than `hang_timeout_s`
(older than `start_timeout_s` before its first beat, and after it marked itself exiting),
is killed if needed, reaped, its unpublished ring slots are discarded, and a replacement
starts with a fresh seed.

Repeated failures end the run: a worker id whose processes die, hang or raise
`max_failures_without_progress` times in a row without publishing a chunk raises
`WorkersFailing` (a bad task config fails the same way every time; restarting will not
help), and `max_restarts` bounds restarts of all kinds. A `LearnerWatchdog` thread notices
a learner loop that stopped polling (logged by it and by the workers) and makes sure a
SIGINT/SIGTERM stops the run within `stop_deadline_s`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from unilab.runtime.control import NOT_STARTED, ControlBlock
from unilab.runtime.ring import RingBuffer
from unilab.runtime.shm import SegmentOwner, sweep_stale_segments
from unilab.runtime.watchdog import LearnerWatchdog
from unilab.runtime.weights import WeightStore
from unilab.runtime.worker_base import (
    WORKER_IGNORED_SIGNALS,
    WorkerContext,
    WorkerLaunch,
    run_worker,
)

log = logging.getLogger("unilab.runtime")


class WorkerFailure(RuntimeError):
    """Workers keep failing: the restart budget is spent."""


class WorkersFailing(WorkerFailure):
    """A worker keeps failing (dying, hanging or raising) before it delivers anything:
    restarting will not help."""


@dataclass(frozen=True)
class WorkerEvent:
    kind: str  # "died" | "hung" | "exited" | "error"
    worker_id: int
    generation: int
    pid: int | None
    exitcode: int | None = None
    discarded_chunks: int = 0
    restarted: bool = False
    detail: str = ""


def worker_fn_path(fn: str | Callable[[WorkerContext], None]) -> str:
    """'module:function' for an importable top-level function (or the string itself)."""
    if isinstance(fn, str):
        return fn
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    if not module or not qualname or "<" in qualname:
        raise ValueError(
            f"worker function {fn!r} is not importable by name; define it at module top level"
        )
    return f"{module}:{qualname}"


class Supervisor:
    """Worker processes of one run. Typical learner code::

        owner = SegmentOwner()  # one per run: every segment, one prefix, one unlink
        ring = RingBuffer(spec, W, envs_per_worker, T, K, owner=owner)
        weights = WeightStore.create(owner, layout)
        stop = StopSignal.install()  # SIGINT/SIGTERM -> flag
        with Supervisor("pkg.mod:worker_main", W, owner=owner, ring=ring, weights=weights,
                        config=plain_dict, seed=seed) as sup:
            while not stop:
                sup.poll()
                for slot in ring.get_ready(timeout=0.1): ...; ring.release(slot)
            save_checkpoint()
        sys.exit(stop.exit_code)

    `shutdown` (also run by the context manager and at exit) stops and reaps the workers
    and unlinks every segment `owner` created. Use it from one thread, the learner's.
    """

    def __init__(
        self,
        worker_fn: str | Callable[[WorkerContext], None],
        num_workers: int,
        *,
        owner: SegmentOwner | None = None,
        ring: RingBuffer | None = None,
        weights: WeightStore | None = None,
        config: Mapping[str, Any] | None = None,
        seed: int = 0,
        hang_timeout_s: float = 1.0,
        start_timeout_s: float = 60.0,
        max_restarts: int | None = 100,
        max_failures_without_progress: int | None = 3,
        poll_interval_s: float = 0.02,
        sweep_stale: bool = True,
        learner_stall_s: float = 30.0,
        stop_escalate_s: float | None = 5.0,
        stop_deadline_s: float | None = 9.0,
        watchdog: bool = True,
    ) -> None:
        """`max_failures_without_progress`: failures in a row (deaths, hangs, exceptions) of
        one worker id without a chunk published in between that end the run with
        `WorkersFailing` (needs `ring` to see chunks; None: off). `learner_stall_s`: the
        learner loop not polling for this long is logged, by the supervisor's watchdog
        thread and by the workers. After SIGINT/SIGTERM, a run that has not begun
        `shutdown` is interrupted once more at `stop_escalate_s` and ended, workers and
        shared memory included, at `stop_deadline_s` (None: never); see watchdog.py."""
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if ring is not None and ring.num_workers != num_workers:
            raise ValueError(
                f"ring was built for {ring.num_workers} workers, supervisor has {num_workers}"
            )
        if hang_timeout_s <= 0 or start_timeout_s <= 0:
            raise ValueError("hang_timeout_s and start_timeout_s must be positive")
        self.worker_fn = worker_fn_path(worker_fn)
        self.num_workers = num_workers
        self.owner = owner or (ring.owner if ring is not None else SegmentOwner())
        self.ring = ring
        self.weights = weights
        self.config = dict(config or {})
        _check_plain(self.config, "config")
        self.seed = seed
        self.hang_timeout_s = hang_timeout_s
        self.start_timeout_s = start_timeout_s
        self.max_restarts = max_restarts
        self.max_failures_without_progress = max_failures_without_progress
        self.learner_stall_s = learner_stall_s
        self.poll_interval_s = poll_interval_s
        self._failures_without_progress = [0] * num_workers
        self._delivered_at_start = [0] * num_workers
        self._learner_seen = time.monotonic()
        self._watchdog = (
            LearnerWatchdog(
                lambda: self._learner_seen,
                self._emergency_exit,
                learner_stall_s=learner_stall_s,
                escalate_s=stop_escalate_s,
                deadline_s=stop_deadline_s,
            )
            if watchdog
            else None
        )
        self._sweep_stale = sweep_stale
        self._mp = mp.get_context("spawn")
        self._control: ControlBlock | None = None
        self._procs: list[BaseProcess | None] = [None] * num_workers
        self._error_conns: list[Connection | None] = [None] * num_workers
        self._generation = [0] * num_workers
        self._started_at = [0.0] * num_workers
        self._last_poll = 0.0
        self._state = "new"  # new -> running -> stopping -> stopped
        self.errors: list[str] = []
        """Formatted tracebacks from workers, newest last."""
        self.counts = {"deaths": 0, "hangs": 0, "restarts": 0, "exits": 0, "discarded_chunks": 0}

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Supervisor:
        if self._state != "new":
            raise RuntimeError(f"start(): supervisor is {self._state}")
        if self._sweep_stale:
            for name in sweep_stale_segments():
                log.warning("removed shared memory left by a dead run: /dev/shm/%s", name)
        self._control = ControlBlock.create(self.owner, self.num_workers)
        self._control.set_learner_stall_s(self.learner_stall_s)
        self._control.learner_beat()
        self._learner_seen = time.monotonic()
        atexit.register(self.shutdown)
        self._state = "running"
        for worker_id in range(self.num_workers):
            self._start_worker(worker_id)
        if self._watchdog is not None:
            self._watchdog.start()
        return self

    def __enter__(self) -> Supervisor:
        return self.start() if self._state == "new" else self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every worker, reap it, unlink every segment of the run. Idempotent."""
        if self._state == "stopped":
            return
        self._state = "stopping"
        if self._watchdog is not None:
            self._watchdog.shutting_down()
        if self._control is not None:
            self._control.request_stop()
        deadline = time.monotonic() + timeout
        for proc in self._procs:
            if proc is not None:
                proc.join(max(0.0, deadline - time.monotonic()))
        # Workers ignore SIGTERM (see worker_base.run_worker): stragglers get SIGKILL.
        for proc in self._procs:
            if proc is not None and proc.exitcode is None:
                log.warning("worker pid %s did not stop within %.1f s: killing", proc.pid, timeout)
                proc.kill()
                proc.join(5.0)
        for worker_id in range(self.num_workers):
            self._collect_errors(worker_id, until_eof=True)
            proc = self._procs[worker_id]
            if proc is not None and proc.exitcode is not None:
                proc.close()  # (one that survived SIGKILL, e.g. in uninterruptible I/O, is left)
            self._procs[worker_id] = None
        if self.ring is not None:
            self.ring.close()
        if self._control is not None:
            self._control.close()
        self.owner.unlink_all()
        atexit.unregister(self.shutdown)
        if self._watchdog is not None:
            self._watchdog.stop()
        self._state = "stopped"

    def _emergency_exit(self, code: int) -> None:
        """From the watchdog thread, when the main thread will not stop: stop and kill the
        workers, unlink the run's memory, exit. (No checkpoint: the learner is stuck.)"""
        if self._control is not None:
            self._control.request_stop()
        for proc in list(self._procs):
            if proc is not None and proc.pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, signal.SIGKILL)
        self.owner.unlink_all()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)

    # -- watching ------------------------------------------------------------------------

    def poll(self, *, force: bool = False) -> list[WorkerEvent]:
        """Detect dead or hung workers and replace them; call it from the learner loop."""
        if self._state != "running":
            return []
        now = time.monotonic()
        self._learner_seen = now
        if not force and now - self._last_poll < self.poll_interval_s:
            return []
        assert self._control is not None
        self._control.learner_beat()
        self._last_poll = now
        assert self._control is not None
        events: list[WorkerEvent] = []
        for worker_id, proc in enumerate(self._procs):
            if proc is None:
                continue
            events.extend(self._collect_errors(worker_id))
            if proc.exitcode is not None:
                kind = "exited" if proc.exitcode == 0 else "died"
            else:
                beat = self._control.last_beat(worker_id)
                if beat == NOT_STARTED:
                    stale = now - self._started_at[worker_id] > self.start_timeout_s
                elif beat < 0:  # exiting since -beat (see control.py)
                    stale = now + beat > self.start_timeout_s
                else:
                    stale = now - beat > self.hang_timeout_s
                if not stale:
                    continue
                kind = "hung"
                proc.kill()  # also ends a SIGSTOPped process
            events.append(self._retire(worker_id, kind))
        return events

    def _retire(self, worker_id: int, kind: str) -> WorkerEvent:
        proc = self._procs[worker_id]
        assert proc is not None
        proc.join(5.0)
        if proc.exitcode is None:
            raise WorkerFailure(f"worker {worker_id} (pid {proc.pid}) could not be reaped")
        self._collect_errors(worker_id, until_eof=True)
        discarded = self.ring.discard_worker_slots(worker_id) if self.ring is not None else 0
        generation, pid, exitcode = self._generation[worker_id], proc.pid, proc.exitcode
        proc.close()
        self._procs[worker_id] = None
        self.counts["discarded_chunks"] += discarded
        self.counts[{"died": "deaths", "hung": "hangs", "exited": "exits"}[kind]] += 1
        restart = kind != "exited"
        if restart:
            self._count_failure(worker_id, kind)
        if kind == "exited":
            log.info("worker %d (pid %s) finished", worker_id, pid)
        else:
            log.warning(
                "worker %d (generation %d, pid %s) %s (exit code %s); %d unpublished chunk(s) "
                "discarded; restarting",
                worker_id, generation, pid, kind, exitcode, discarded,
            )  # fmt: skip
        if restart:
            if self.max_restarts is not None and self.counts["restarts"] >= self.max_restarts:
                last = self.errors[-1] if self.errors else "(no traceback)"
                raise WorkerFailure(
                    f"workers failed {self.counts['restarts'] + 1} times "
                    f"(max_restarts={self.max_restarts}); last error:\n{last}"
                )
            self.counts["restarts"] += 1
            self._generation[worker_id] += 1
            self._start_worker(worker_id)
        return WorkerEvent(kind, worker_id, generation, pid, exitcode, discarded, restart)

    def _count_failure(self, worker_id: int, kind: str) -> None:
        """Apply the repeated-failure rule: deaths and hangs alike count, unless the failed
        process published a chunk (then the count starts over)."""
        if self.ring is None or self.max_failures_without_progress is None:
            return
        delivered = self.ring.delivered_by(worker_id)
        if delivered > self._delivered_at_start[worker_id]:
            self._failures_without_progress[worker_id] = 0
        self._failures_without_progress[worker_id] += 1
        self._delivered_at_start[worker_id] = delivered
        count = self._failures_without_progress[worker_id]
        if count >= self.max_failures_without_progress:
            last = self.errors[-1] if self.errors else "(no traceback)"
            raise WorkersFailing(
                f"worker {worker_id} failed {count} times in a row ({kind} last) without "
                f"delivering a chunk; restarting will not help. Last error:\n{last}"
            )

    def _collect_errors(self, worker_id: int, *, until_eof: bool = False) -> list[WorkerEvent]:
        conn = self._error_conns[worker_id]
        if conn is None:
            return []
        events = []
        try:
            while conn.poll(0):
                text = conn.recv_bytes().decode("utf-8", "replace")
                self.errors.append(text)
                log.error("%s", text)
                proc = self._procs[worker_id]
                events.append(
                    WorkerEvent(
                        "error",
                        worker_id,
                        self._generation[worker_id],
                        proc.pid if proc is not None else None,
                        detail=text,
                    )
                )
        except (EOFError, OSError):
            until_eof = True  # the worker's end is closed: nothing more will come
        if until_eof:
            conn.close()
            self._error_conns[worker_id] = None
        return events

    def _start_worker(self, worker_id: int) -> None:
        assert self._control is not None
        generation = self._generation[worker_id]
        read_conn, write_conn = self._mp.Pipe(duplex=False)
        launch = WorkerLaunch(
            worker_fn=self.worker_fn,
            worker_id=worker_id,
            generation=generation,
            # Unique per (worker, generation): a replacement never repeats a seed.
            seed=self.seed + worker_id + self.num_workers * generation,
            parent_pid=os.getpid(),
            control=self._control.handle(),
            errors=write_conn,
            ring=self.ring.handle(worker_id) if self.ring is not None else None,
            weights=self.weights.handle() if self.weights is not None else None,
            config=self.config,
        )
        self._control.reset_beat(worker_id)
        proc = self._mp.Process(
            target=run_worker, args=(launch,), name=f"unilab-worker-{worker_id}", daemon=True
        )
        with _signals_ignored_by_children():
            proc.start()
        write_conn.close()  # the worker holds the only write end, so its exit gives EOF
        self._procs[worker_id] = proc
        self._error_conns[worker_id] = read_conn
        self._started_at[worker_id] = time.monotonic()

    # -- inspection ----------------------------------------------------------------------

    def pids(self) -> list[int | None]:
        return [p.pid if p is not None else None for p in self._procs]

    def generations(self) -> list[int]:
        return list(self._generation)

    def worker_running(self, worker_id: int) -> bool:
        """True once the worker's current process has sent its first heartbeat."""
        return (
            self._control is not None
            and self._procs[worker_id] is not None
            and self._control.last_beat(worker_id) > NOT_STARTED
        )

    def steps_total(self) -> int:
        """Env steps the workers have stepped so far (their progress; 0 before start)."""
        return self._control.steps_total() if self._control is not None else 0

    def stats(self) -> dict[str, int]:
        return dict(self.counts)


_PLAIN_SCALARS = (str, int, float, bool, bytes, type(None))


def _check_plain(value: Any, where: str) -> None:
    """Worker config crosses into new processes: plain values only (no arbitrary objects)."""
    if isinstance(value, _PLAIN_SCALARS):
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: keys must be str, got {key!r}")
            _check_plain(item, f"{where}.{key}")
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}; worker config holds only str, int, float, "
        "bool, bytes, None, lists and dicts (convert OmegaConf with OmegaConf.to_container)"
    )


@contextmanager
def _signals_ignored_by_children() -> Iterator[None]:
    """Start a child with SIGINT/SIGTERM ignored from its first instruction.

    An ignored disposition survives fork and exec, so a Ctrl-C to the process group cannot
    kill a worker while it imports (before `run_worker` ignores the signals itself). The
    signals are blocked in this thread first, so on Linux one arriving during these ~1-2 ms
    stays pending and reaches our own handler afterwards (when no other thread takes it).
    Only possible from the main thread; elsewhere children start with default handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, WORKER_IGNORED_SIGNALS)
    old_handlers = {s: signal.signal(s, signal.SIG_IGN) for s in WORKER_IGNORED_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
