"""`unilab play` / `unilab viz` as a user runs them (a subprocess with MUJOCO_GL=egl):
the mp4 and the Rerun recording are complete and not blank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from rerun.chunk import RrdReader

from unilab.algos.registry import ALGORITHMS
from unilab.config import compose
from unilab.config.compose import to_yaml
from unilab.train.checkpoint import rng_state, save_checkpoint
from unilab.train.run_dir import new_run_dir
from unilab.viz.video import read_video


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained cart-pole PPO run, saved as the training loop saves one."""
    torch.manual_seed(0)
    cfg = compose(["algo.actor_hidden=[32]", f"run.out_dir={tmp_path_factory.mktemp('runs')}"])
    algo = ALGORITHMS.get("ppo").algo_cls(cfg.algo, {"policy": 5}, 1, torch.device("cpu"))
    run = new_run_dir(cfg)
    save_checkpoint(
        run.checkpoints,
        3,
        {
            "iteration": 3,
            "env_steps": 0,
            "algo": algo.state_dict(),
            "rng": rng_state(),
            "config": to_yaml(cfg),
            "metadata_task": "cartpole_balance",
        },
    )
    return run.path


def _unilab(*args: str, gl: str = "egl") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MUJOCO_GL": gl, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "unilab.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def _steps_per_entity(path: Path) -> dict[str, int]:
    rows: dict[str, int] = {}
    for chunk in RrdReader(path).stream().to_chunks():
        if not chunk.is_static:
            rows[chunk.entity_path] = rows.get(chunk.entity_path, 0) + chunk.num_rows
    return rows


def test_play_writes_video_recording_and_summary(run_dir: Path) -> None:
    out = _unilab(
        "play", str(run_dir), "task.episode_length_s=1.0", "--episodes", "3",
        "--width", "160", "--height", "120", "--name", "clip",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    media = run_dir / "media"
    summary = json.loads((media / "clip.json").read_text())
    assert summary["notes"] == [], summary["notes"]  # rendering worked: no "no video" note
    assert len(summary["episodes"]) >= 3 and summary["num_envs"] == 3
    frames = summary["steps"] + 1  # the start state, then one frame per step
    assert summary["video_frames"] == frames and summary["recorded_steps"] == frames

    video = read_video(media / "clip.mp4")
    assert video.shape == (frames, 120, 160, 3)
    assert video.reshape(frames, -1).std(axis=1).min() > 5.0  # no blank frame
    assert np.abs(video[-1].astype(int) - video[0].astype(int)).mean() > 0.5  # it moves

    rows = _steps_per_entity(media / "clip.rrd")
    for entity in (
        "/world/bodies/cart", "/world/bodies/pole", "/joints/hinge", "/actions/slider",
        "/reward/total", "/reward/upright", "/episode/index",
    ):  # fmt: skip
        assert rows.get(entity) == frames, (entity, rows.get(entity))
    static = {c.entity_path for c in RrdReader(media / "clip.rrd").stream().to_chunks()}
    assert {"/world/static/floor", "/world/bodies/cart/cart", "/world/bodies/pole/pole"} <= static


def test_without_rendering_play_says_why_and_still_records(run_dir: Path) -> None:
    out = _unilab("play", str(run_dir), "--name", "nogl", gl="disable")
    assert out.returncode == 0, out.stderr
    assert "no video" in out.stderr and "MUJOCO_GL=egl" in out.stderr
    media = run_dir / "media"
    assert not (media / "nogl.mp4").exists()
    summary = json.loads((media / "nogl.json").read_text())
    assert _steps_per_entity(media / "nogl.rrd")["/joints/slider"] == summary["steps"] + 1


def test_viz_records_the_newest_checkpoint(run_dir: Path) -> None:
    out = _unilab("viz", str(run_dir))
    assert out.returncode == 0, out.stderr
    assert (run_dir / "media" / "viz_ckpt_000000003.rrd").is_file()
    assert not (run_dir / "media" / "viz_ckpt_000000003.mp4").exists()
    bad = _unilab("play", str(run_dir / "nope"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
