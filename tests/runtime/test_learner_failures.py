"""What the learner does when its workers fail: `WorkersFailing` for a worker that dies
before delivering anything, `RuntimeStalled` for workers that deliver nothing, and workers
that go when their parent is killed even while blocked (the kernel's parent-death signal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.config import compose
from unilab.config.compose import to_yaml
from unilab.runtime.learner_side import LearnerRuntime, RuntimeStalled
from unilab.runtime.supervisor import WorkersFailing

HERE = Path(__file__).parent
FIELDS = {"obs_policy": ((3,), "float32"), "episode_return": ((), "float32")}


def _runtime(worker: str, *overrides: str) -> LearnerRuntime:
    cfg = compose(["sim.num_envs=2", "runtime.chunk_len=4", *overrides])
    return LearnerRuntime(
        cfg,
        to_yaml(cfg),
        FIELDS,
        4,
        torch.device("cpu"),
        worker_target=f"failing_workers:{worker}",
    )


def test_a_worker_that_keeps_failing_stops_the_run_with_its_error() -> None:
    runtime = _runtime("failing_worker").start()
    try:
        runtime.publish(np.zeros(4, np.float32))
        t0 = time.monotonic()
        with pytest.raises(WorkersFailing) as err:
            runtime.next_batch()
        assert time.monotonic() - t0 < 60
    finally:
        runtime.close()
    text = str(err.value)
    assert "worker 0 failed 3 times in a row (died last) without delivering a chunk" in text
    assert "planned failure: this worker cannot build its task" in text


def test_workers_that_deliver_nothing_are_reported_as_stalled() -> None:
    runtime = _runtime("stalling_worker", "runtime.wait_timeout_s=1.5").start()
    try:
        runtime.publish(np.zeros(4, np.float32))
        t0 = time.monotonic()
        with pytest.raises(RuntimeStalled, match=r"no chunk and no env step from the workers"):
            runtime.next_batch()
        assert 1.4 < time.monotonic() - t0 < 30
        assert runtime.supervisor_stats()["deaths"] == 0  # alive all along: not restarted
    finally:
        runtime.close()


def test_a_slow_worker_that_keeps_stepping_is_waited_for() -> None:
    # Its chunk takes about twice runtime.wait_timeout_s (a busy box, a long chunk); its
    # step count moves all the while, so the learner waits instead of calling it stalled.
    runtime = _runtime("slow_worker", "runtime.wait_timeout_s=1.5").start()
    try:
        runtime.publish(np.zeros(4, np.float32))
        t0 = time.monotonic()
        batch = runtime.next_batch()
        assert time.monotonic() - t0 > 2.5
        assert batch.env_steps == 4 * 2
        assert batch.staleness == [0]
    finally:
        runtime.close()


def _gone(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux-only")
def test_a_blocked_worker_dies_with_its_killed_parent(tmp_path: Path) -> None:
    asleep = tmp_path / "asleep"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "failing_workers.py"), "parent", str(asleep)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ASLEEP "), line
    (worker,) = json.loads(line[7:])
    assert asleep.read_text() == str(worker) and not _gone(worker)
    os.kill(proc.pid, signal.SIGKILL)  # no handler, no atexit, no shutdown
    proc.wait(timeout=10)
    proc.stdout.close()
    deadline = time.monotonic() + 3.0  # the worker sleeps 120 s: only PDEATHSIG ends it now
    while not _gone(worker):
        if time.monotonic() > deadline:
            os.kill(worker, signal.SIGKILL)
            raise AssertionError("a blocked worker outlived its parent (no parent-death signal)")
        time.sleep(0.05)
