"""`unilab collect` as a user runs it: a small collection that `unilab data validate`
passes and a rerun that continues it; bad input exits 2 with one message and writes
nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _unilab(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MUJOCO_GL": "egl", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "unilab.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_collect_validates_and_continues(tmp_path: Path) -> None:
    store = tmp_path / "demos.zarr"
    first = _unilab("collect", "task=arm_stack", "episodes=2", f"store={store}", "envs=2")
    assert first.returncode == 0, first.stderr
    assert "collected 2 episodes" in first.stdout and "the store holds 2 of 2" in first.stdout
    assert "ring buffer" in first.stderr and "MiB" in first.stderr  # said at start
    more = _unilab(
        "collect", "task=arm_stack", "episodes=3", f"store={store}", "envs=2", "workers=1"
    )
    assert more.returncode == 0, more.stderr
    assert "collecting 1 more" in more.stderr and "the store holds 3 of 3" in more.stdout
    check = _unilab("data", "validate", str(store))
    assert check.returncode == 0 and check.stdout.strip().endswith(": ok"), check.stdout
    info = _unilab("data", "info", str(store))
    assert "tasks: arm_stack 3" in info.stdout and "success: true 3" in info.stdout


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["task=arm_stack", "task.cameras=[front,top]"], "unknown camera 'top'"),
        (["task=cartpole_balance"], "has no scripted expert"),
        (["task=arm_stack", "algo.lr=1"], "does not take 'algo.lr'"),
        (["task=arm_stack", "episodes=two"], "episodes='two' must be an integer"),
        (["task=arm_stack", "runtime.max_ring_mb=0.5"], "exceeds max_ring_mb=0.5"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    tmp_path: Path, words: list[str], message: str
) -> None:
    store = tmp_path / "none.zarr"
    extra = [] if any(w.startswith("episodes=") for w in words) else ["episodes=2"]
    out = _unilab("collect", *words, *extra, f"store={store}")
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert not store.exists()
