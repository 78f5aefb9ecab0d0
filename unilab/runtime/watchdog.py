"""A thread in the learner process that watches the learner's own loop.

The supervisor's checks run inside the learner loop (`Supervisor.poll`), so they stop when
the loop does: an update that never returns, or a wait that outlasts a Ctrl-C. This thread
does not depend on the loop:

- **Stall notice.** When the loop has not polled for `learner_stall_s` (the workers are
  waiting on a learner that stopped pulling chunks), it logs so once, and again when the
  learner is back. Workers log the same from their side (see `WorkerContext.heartbeat`).
- **Stop deadline.** It sees SIGINT/SIGTERM arrive even when the main thread is stuck in C
  code (`signal.set_wakeup_fd`: the C-level handler writes the signal number to a pipe this
  thread reads). If the run has not begun its shutdown `escalate_s` after the first signal,
  it delivers the same signal to the main thread again, which the learner's handler turns
  into SystemExit (the "second Ctrl-C"), so a stuck Python loop unwinds through its
  `finally:` blocks. If the process is still there `deadline_s` after the first signal
  (the main thread never returns to the interpreter), it stops the workers, unlinks the
  run's shared memory and exits with 128 + signal number: a run always stops within
  `deadline_s` of a Ctrl-C, with nothing left behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable

log = logging.getLogger("unilab.runtime")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_TICK_S = 0.2


class StallLimit:
    """When silence from the learner counts as a stall: after `base_s`, or after twice the
    longest silence so far that ended with the learner back at work. A CPU learner's
    flow-matching update can take minutes every iteration; that is slow, not stuck, and
    warning about it each time would hide a real stall."""

    def __init__(self, base_s: float) -> None:
        self.base_s = base_s
        self.longest_s = 0.0
        """The longest silence that ended with the learner pulling again."""
        self._silent_s = 0.0

    def observe(self, silent_s: float) -> float:
        """Feed the current silence (s since the learner last pulled a chunk); returns the
        limit it is judged against."""
        if silent_s < self._silent_s:  # the learner was back in between
            self.longest_s = max(self.longest_s, self._silent_s)
        self._silent_s = silent_s
        return max(self.base_s, 2.0 * self.longest_s)


class LearnerWatchdog:
    def __init__(
        self,
        last_activity: Callable[[], float],
        emergency_exit: Callable[[int], None],
        *,
        learner_stall_s: float = 30.0,
        escalate_s: float | None = 5.0,
        deadline_s: float | None = 9.0,
    ) -> None:
        self._last_activity = last_activity
        self._emergency_exit = emergency_exit
        self.learner_stall_s = learner_stall_s
        self.escalate_s = escalate_s
        self.deadline_s = deadline_s
        self._stop = threading.Event()
        self._shutting_down = False
        self._thread: threading.Thread | None = None
        self._pipe: tuple[int, int] | None = None
        self._old_wakeup_fd = -1
        self._main_ident = threading.main_thread().ident
        self.signal_at: float | None = None
        self.signum: int | None = None
        self.stalls = 0

    def start(self) -> LearnerWatchdog:
        if threading.current_thread() is threading.main_thread():
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            if old != -1:  # someone else (an asyncio loop) uses it: leave theirs in place
                signal.set_wakeup_fd(old)
                os.close(r)
                os.close(w)
            else:
                self._pipe = (r, w)
        self._thread = threading.Thread(target=self._run, name="unilab-watchdog", daemon=True)
        self._thread.start()
        return self

    def shutting_down(self) -> None:
        """The learner is stopping on its own: no more signals to the main thread (the
        deadline still holds)."""
        self._shutting_down = True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        if self._pipe is not None and threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(-1)
            for fd in self._pipe:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pipe = None

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        stalled = False
        escalated = False
        stall_limit = StallLimit(self.learner_stall_s)
        while not self._stop.is_set():
            self._read_signals(_TICK_S)
            now = time.monotonic()
            idle = now - self._last_activity()
            limit = stall_limit.observe(idle)
            if idle > limit and not stalled and not self._shutting_down:
                stalled = True
                self.stalls += 1
                log.warning(
                    "the learner has not pulled a chunk for %.0f s (a stuck update?); the "
                    "workers are waiting",
                    idle,
                )
            elif stalled and idle <= limit:
                stalled = False
                log.warning("the learner is pulling chunks again")
            if self.signal_at is None or self.signum is None:
                continue
            since = now - self.signal_at
            if (
                self.escalate_s is not None
                and since > self.escalate_s
                and not escalated
                and not self._shutting_down
            ):
                escalated = True
                log.warning(
                    "%s arrived %.1f s ago and the learner has not begun to stop: interrupting it",
                    signal.Signals(self.signum).name,
                    since,
                )
                if self._main_ident is not None:
                    signal.pthread_kill(self._main_ident, self.signum)
            if self.deadline_s is not None and since > self.deadline_s:
                log.error(
                    "the learner did not stop within %.0f s of %s: stopping the workers, "
                    "removing shared memory and exiting",
                    self.deadline_s,
                    signal.Signals(self.signum).name,
                )
                self._emergency_exit(128 + self.signum)
                return

    def _read_signals(self, timeout: float) -> None:
        if self._pipe is None:
            self._stop.wait(timeout)
            return
        r = self._pipe[0]
        try:
            ready, _, _ = select.select([r], [], [], timeout)
        except (OSError, ValueError):  # the pipe was closed by stop()
            return
        if not ready:
            return
        try:
            data = os.read(r, 512)
        except (BlockingIOError, OSError):
            return
        for signum in data:
            if signum in STOP_SIGNALS and self.signal_at is None:
                self.signal_at, self.signum = time.monotonic(), signum
