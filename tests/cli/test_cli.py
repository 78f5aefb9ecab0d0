"""The `unilab` console script, run as a user would: a subprocess outside the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNILAB = shutil.which("unilab", path=str(Path(sys.executable).parent)) or "unilab"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run(
        [UNILAB, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


def test_help_lists_every_verb(tmp_path: Path) -> None:
    out = run("--help", cwd=tmp_path)
    assert out.returncode == 0
    for verb in ("train", "play", "eval", "export", "viz", "bench", "list", "data"):
        assert verb in out.stdout


def test_train_help_shows_options_and_documented_config_keys(tmp_path: Path) -> None:
    out = run("train", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--quiet" in out.stdout
    assert "runtime.num_workers (int, default 1, >= 1)" in out.stdout
    assert "Sim worker processes." in out.stdout
    assert "algo.lr (float" in out.stdout
    assert "task.max_pole_angle" in out.stdout  # the default task's own keys


def test_list_tasks_algorithms_robots_presets(tmp_path: Path) -> None:
    out = run("list", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for name in ("cartpole_balance", "ppo", "quadruped", "humanoid", "arm", "cartpole_balance/ppo"):
        assert name in out.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("train", "runtime.num_worker=2"), "did you mean num_workers"),
        (("train", "runtime.num_workers=abc"), "expected int"),
        (("train", "task=nope"), "Registered:"),
        (("train", "algo=nope"), "unknown algorithm 'nope'"),
        (("train", "preset=/no/such.yaml"), "/no/such.yaml"),
        (("train", "device=cuda:7"), "not present on this machine"),
    ],
)
def test_bad_input_is_one_message_without_traceback(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    out = run(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert expected in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()  # nothing started


def test_unknown_benchmark_lists_the_valid_ones(tmp_path: Path) -> None:
    out = run("bench", "warp-speed", cwd=tmp_path)
    assert out.returncode == 2
    assert "unknown verb 'warp-speed'" in out.stderr and "sim, runtime" in out.stderr
    assert "Traceback" not in out.stderr
