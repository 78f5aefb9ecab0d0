"""What runs inside a worker process: its context object and the process entry point.

A worker function is any importable ``def worker_main(ctx: WorkerContext) -> None``. It loops
until `ctx.should_stop()` and calls `ctx.heartbeat()` at least every `hang_timeout_s` (once
per env step is cheap: one store of a float). `ctx.acquire_slot()` heartbeats while it waits.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from unilab.runtime.control import ControlBlock, ControlHandle
from unilab.runtime.ring import RingHandle
from unilab.runtime.ring_writer import RingWriter
from unilab.runtime.watchdog import StallLimit
from unilab.runtime.weights import WeightHandle, WeightStore

_PARENT_CHECK_S = 0.25
log = logging.getLogger("unilab.runtime")
WORKER_IGNORED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1


class StopRequested(BaseException):
    """Raised inside a worker when the run stops or the parent died; ends the worker cleanly.

    A BaseException so that a task's ``except Exception`` does not swallow it.
    """


@dataclass(frozen=True)
class WorkerLaunch:
    """Everything a worker process starts from; plain values and pipe ends only."""

    worker_fn: str  # "package.module:function"
    worker_id: int
    generation: int
    seed: int
    parent_pid: int
    control: ControlHandle
    errors: Connection  # write end: formatted tracebacks, as UTF-8 bytes
    ring: RingHandle | None = None
    weights: WeightHandle | None = None
    config: dict[str, Any] = field(default_factory=dict)


class WorkerContext:
    """Handed to the worker function: identity, seed, ring, weights, heartbeat, stop."""

    def __init__(self, launch: WorkerLaunch) -> None:
        self.worker_id = launch.worker_id
        self.generation = launch.generation
        """0 for the first process of this worker id, +1 per restart."""
        self.seed = launch.seed
        self.config = launch.config
        self._parent_pid = launch.parent_pid
        self._control = ControlBlock.attach(launch.control)
        self.ring = RingWriter(launch.ring, launch.generation) if launch.ring else None
        self.weights = WeightStore.attach(launch.weights) if launch.weights else None
        self._next_parent_check = 0.0
        self._learner_stalled_since: float | None = None
        self._stall_limit = StallLimit(self._control.learner_stall_s)

    @property
    def num_envs(self) -> int:
        """Envs of this worker in the ring (0 without a ring)."""
        return self.ring.n_envs if self.ring else 0

    def heartbeat(self) -> None:
        """Tell the supervisor this worker is alive; raises StopRequested if the parent died."""
        self._control.beat(self.worker_id)
        self._check_parent()

    def stepped(self) -> None:
        """A heartbeat after one step of the envs: alive *and* making progress (the learner
        waits on a slow chunk instead of calling the run stalled)."""
        self._control.stepped(self.worker_id)
        self._check_parent()

    def _check_parent(self) -> None:
        now = time.monotonic()
        if now >= self._next_parent_check:
            self._next_parent_check = now + _PARENT_CHECK_S
            if os.getppid() != self._parent_pid:
                raise StopRequested("parent process exited")
            self._watch_learner(now)

    def _watch_learner(self, now: float) -> None:
        """Log once when the learner stops pulling chunks for `learner_stall_s` (or twice
        its longest update so far: `StallLimit`), and once when it is back (a worker's
        stderr is where an operator looks)."""
        beat = self._control.learner_last_beat()
        if self._control.learner_stall_s <= 0 or beat <= 0:
            return
        silent = now - beat
        limit = self._stall_limit.observe(silent)
        if silent > limit and self._learner_stalled_since is None:
            self._learner_stalled_since = beat
            log.warning(
                "worker %d: the learner has not pulled a chunk for %.0f s (a stuck update?); "
                "waiting",
                self.worker_id,
                silent,
            )
        elif silent <= limit and self._learner_stalled_since is not None:
            log.warning(
                "worker %d: the learner is pulling again after %.0f s",
                self.worker_id,
                beat - self._learner_stalled_since,
            )
            self._learner_stalled_since = None

    def mark_exiting(self) -> None:
        """Tell the supervisor this worker is ending, so a slow exit is not a hang."""
        self._control.mark_exiting(self.worker_id)

    def should_stop(self) -> bool:
        """Heartbeat, then True once the supervisor asked the workers to stop."""
        self.heartbeat()
        return self._control.stop_requested()

    def check_stop(self) -> None:
        if self.should_stop():
            raise StopRequested("stop requested")

    def acquire_slot(self, timeout: float | None = None) -> int:
        """A ring slot to write into; waits (heartbeating) until one is free.

        Raises StopRequested when the run stops while waiting, TimeoutError after `timeout`.
        """
        if self.ring is None:
            raise RuntimeError("this worker was started without a ring buffer")
        self.check_stop()
        return self.ring.acquire_free_slot(
            float("inf") if timeout is None else timeout, on_wait=self.check_stop
        )


def run_worker(launch: WorkerLaunch) -> None:
    """Process entry point (multiprocessing target). Exit code 0: stopped, 1: raised."""
    # Ctrl-C (and a service manager's SIGTERM) reach the whole process group; the main
    # process decides how workers stop. The supervisor starts us with both already ignored
    # (see supervisor._signals_ignored_by_children); this covers other launchers.
    for signum in WORKER_IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    _die_with_parent(launch.parent_pid)
    ctx = None
    try:
        fn = import_worker_fn(launch.worker_fn)
        ctx = WorkerContext(launch)
        fn(ctx)
    except StopRequested:
        pass
    except SystemExit:
        raise
    except BaseException:
        if ctx is not None:
            ctx.mark_exiting()
        _report(launch, traceback.format_exc())
        sys.exit(1)
    finally:
        if ctx is not None:
            ctx.mark_exiting()
        with contextlib.suppress(OSError):
            launch.errors.close()


def import_worker_fn(path: str) -> Callable[[WorkerContext], None]:
    module_name, sep, qualname = path.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"worker function must be 'package.module:function', got {path!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{path!r} is not callable")
    return obj


_MAX_REPORT_CHARS = 30_000  # well inside one pipe buffer, so sending never blocks


def _report(launch: WorkerLaunch, tb: str) -> None:
    if len(tb) > _MAX_REPORT_CHARS:  # keep the end: it names the exception
        tb = "...(truncated)...\n" + tb[-_MAX_REPORT_CHARS:]
    text = (
        f"worker {launch.worker_id} (generation {launch.generation}, pid {os.getpid()}) "
        f"raised:\n{tb}"
    )
    try:
        launch.errors.send_bytes(text.encode("utf-8", "replace"))
    except OSError:
        sys.stderr.write(text)  # the supervisor is gone; stderr is all that is left


def _die_with_parent(parent_pid: int) -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)
