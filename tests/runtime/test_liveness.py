"""Liveness: hangs count toward the repeated-failure rule; a learner that stops pulling is
noticed by the supervisor and the workers; SIGINT stops a run with a stuck learner within
10 s, leaving no shared memory and no worker behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_signal_shutdown import process_gone
from test_supervisor import make

from unilab.runtime.shm import list_segments
from unilab.runtime.supervisor import WorkersFailing

HERE = Path(__file__).parent


def test_a_worker_that_keeps_hanging_stops_the_run() -> None:
    """Worker 0 hangs before its first chunk in every generation: after 3 hangs in a row the
    run stops with WorkersFailing. (main counted only deaths toward this rule: it restarted
    the hanging worker until max_restarts=100, about 100 × hang_timeout_s later.) Worker 1
    hangs too, but only after delivering chunks each time, so its count starts over."""
    config = {"step_sleep_s": 0.001, "hang_worker": 0, "hang_at_seq": 0}
    learner = make(2, config=config, hang_timeout_s=0.3, start_timeout_s=30.0)
    sup = learner.sup
    t0 = time.monotonic()
    with sup, pytest.raises(WorkersFailing, match=r"worker 0 failed 3 times in a row \(hung"):
        learner.run_until(lambda: False, 30)
    assert time.monotonic() - t0 < 30
    assert sup.stats()["hangs"] >= 3 and sup.stats()["deaths"] == 0
    assert list_segments(sup.owner.prefix) == []


def test_a_worker_that_hangs_after_delivering_is_restarted_not_failed() -> None:
    config = {"step_sleep_s": 0.001, "hang_worker": 1, "hang_at_seq": 2}
    learner = make(2, config=config, hang_timeout_s=0.3, start_timeout_s=30.0)
    sup = learner.sup
    with sup:
        learner.run_until(lambda: sup.stats()["hangs"] >= 3, 40)
        learner.run_until(lambda: sup.generations()[1] >= 3, 10)
    assert sup.stats()["hangs"] >= 3
    learner.check_streams()


def _start_stuck(
    mode: str, escalate: float, deadline: float, stall: float
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    args = [mode, str(escalate), str(deadline), str(stall)]
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "runtime_procs.py"), "stuck", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        raise AssertionError(f"stuck scenario did not start: {line!r}\n{proc.communicate()[1]}")
    return proc, json.loads(line.split(" ", 1)[1])


def _stop_stuck(mode: str, escalate: float, deadline: float, stall: float) -> tuple[str, str]:
    proc, info = _start_stuck(mode, escalate, deadline, stall)
    time.sleep(stall + 1.0)  # long enough for the stall notices
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)  # one Ctrl-C, to the learner only
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - t0
    print(f"{mode}: stopped {took:.1f} s after SIGINT (escalate {escalate}, deadline {deadline})")
    assert proc.returncode == 130, err
    assert took < 10.0, f"the run took {took:.1f} s to stop"
    assert took < deadline + 2.0
    assert list_segments(info["prefix"]) == []
    deadline_at = time.monotonic() + 5
    while not all(process_gone(pid) for pid in info["pids"]):
        assert time.monotonic() < deadline_at, "workers outlived the run"
        time.sleep(0.05)
    # Noticed from both sides while the learner was stuck.
    assert "the learner has not pulled a chunk for" in err
    assert "worker 0: the learner has not pulled a chunk" in err
    assert "worker 1: the learner has not pulled a chunk" in err
    return out, err


def test_sigint_stops_a_stuck_python_update() -> None:
    """main: the first SIGINT only set a flag the stuck loop never read; the run went on
    until a second Ctrl-C. Here the watchdog delivers the second one itself."""
    out, err = _stop_stuck("python", escalate=1.0, deadline=6.0, stall=1.0)
    assert "interrupting it" in err
    assert "finally: shutting down" in out  # unwound through the learner's finally


def test_sigint_stops_a_learner_stuck_outside_the_interpreter() -> None:
    """A main thread that never returns to Python (C code, signals blocked) cannot run any
    handler: the watchdog stops workers, removes the memory and exits at the deadline."""
    out, err = _stop_stuck("c", escalate=1.0, deadline=2.5, stall=1.0)
    assert "did not stop within" in err
    assert "finally: shutting down" not in out


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["python", "c"])
def test_sigint_stops_a_stuck_learner_within_10_s_with_default_settings(mode: str) -> None:
    _stop_stuck(mode, escalate=5.0, deadline=9.0, stall=2.0)


def test_a_slow_learner_is_reported_once_not_every_update() -> None:
    """A silence that ended with the learner back sets the bar: the next update as slow
    as that one is not a stall, a silence twice as long is."""
    from unilab.runtime.watchdog import StallLimit

    limit = StallLimit(30.0)
    assert limit.observe(10.0) == 30.0
    assert limit.observe(45.0) == 30.0  # the first long update: reported (45 > 30)
    assert limit.observe(0.5) == 90.0  # it ended: 2 x 45 s from now on
    assert all(limit.observe(s) == 90.0 for s in (20.0, 44.0, 60.0))  # 60 < 90: no warning
    assert limit.observe(1.0) == 120.0  # that 60 s update ended: the bar follows it
    limit = StallLimit(30.0)  # a learner that never comes back keeps the base limit
    assert [limit.observe(s) for s in (10.0, 31.0, 200.0)] == [30.0, 30.0, 30.0]
