"""A learner main process under SIGINT, SIGTERM and SIGKILL: exit codes and leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from unilab.runtime.shm import list_segments, owner_prefix, sweep_stale_segments

HERE = Path(__file__).parent


def process_gone(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True


def start_main(wait_for: str = "READY") -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "runtime_procs.py"), "main"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a shell job
    )
    assert proc.stdout is not None
    while True:  # STARTED: workers spawned; READY: the first chunks went through
        line = proc.stdout.readline()
        if not line.startswith(("STARTED ", "READY ")):
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"main script did not start: {line!r}\n{err}")
        if line.startswith(wait_for):
            return proc, json.loads(line.split(" ", 1)[1])


@pytest.mark.parametrize(
    ("signum", "to_group", "when", "code"),
    [
        (signal.SIGINT, True, "READY", 130),
        (signal.SIGINT, True, "STARTED", 130),  # workers still starting up
        (signal.SIGTERM, False, "READY", 143),
        (signal.SIGTERM, True, "STARTED", 143),  # a service manager signalling the group
    ],
    ids=["ctrl-c", "ctrl-c-during-startup", "sigterm", "sigterm-group-during-startup"],
)
def test_signal_gives_orderly_exit_and_no_leftover_memory(
    signum: int, to_group: bool, when: str, code: int
) -> None:
    proc, info = start_main(when)
    # Other runs may share /dev/shm: compare what this process created (its pid prefix).
    ours = owner_prefix(proc.pid)
    assert list_segments(ours) == sorted(f"{info['prefix']}_{p}" for p in ("ctl", "ring"))
    if to_group:  # Ctrl-C in a terminal signals the whole foreground group, workers too
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert "final checkpoint:" in out and ", 0 problems" in out, out
    assert list_segments(info["prefix"]) == []
    assert list_segments(ours) == []
    assert "resource_tracker" not in err and "leaked" not in err
    assert "Traceback" not in err, err  # also no worker killed by Ctrl-C while importing
    assert all(process_gone(pid) for pid in info["pids"])


def test_workers_die_with_their_parent_and_next_run_sweeps() -> None:
    proc, info = start_main()
    proc.kill()  # SIGKILL: no handler, no atexit
    proc.communicate(timeout=10)
    deadline = time.monotonic() + 5
    while not all(process_gone(pid) for pid in info["pids"]):
        assert time.monotonic() < deadline, "workers outlived their parent"
        time.sleep(0.05)
    # Nobody could unlink: the owner died. (A concurrent run's start-up sweep may already
    # have removed some, as it should; so this is a subset check.)
    assert set(list_segments(info["prefix"])) <= set(info["segments"])
    assert len(info["segments"]) == 2  # ring and control block
    sweep_stale_segments()
    assert list_segments(info["prefix"]) == []
