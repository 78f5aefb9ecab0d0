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


def _camera_images(path: Path, entity: str) -> dict[int, np.ndarray]:
    """step -> the uint8 RGB image logged at `entity` (raw `rr.Image` buffers)."""
    out: dict[int, np.ndarray] = {}
    for chunk in RrdReader(path).stream().to_chunks():
        if chunk.entity_path != entity or chunk.is_static:
            continue
        batch = chunk.to_record_batch()
        steps = batch.column("step").to_numpy()
        buffers = batch.column("Image:buffer")
        for i, step in enumerate(steps):
            pixels = np.asarray(buffers[i].values.flatten().to_numpy(zero_copy_only=False))
            out[int(step)] = pixels.astype(np.uint8).reshape(64, 64, 3)
    return out


def test_play_expert_shows_the_observed_camera_views(tmp_path: Path) -> None:
    out = _unilab(
        "play", "expert", "task=arm_pick_place", "task.episode_length_s=1.0", "--episodes", "1",
        "--width", "320", "--height", "240", "--name", "expert", "--out", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    media = tmp_path / "media"
    summary = json.loads((media / "expert.json").read_text())
    assert summary["notes"] == [] and summary["policy"] == "expert"
    frames = summary["steps"] + 1
    video = read_video(media / "expert.mp4")
    # The scene, then a column of the two cameras as 120 px squares.
    assert video.shape == (frames, 240, 320 + 120, 3)
    rows = _steps_per_entity(media / "expert.rrd")
    assert rows["/cameras/front"] == rows["/cameras/wrist"] == frames
    front = _camera_images(media / "expert.rrd", "/cameras/front")
    wrist = _camera_images(media / "expert.rrd", "/cameras/wrist")
    for step in (0, frames // 2, frames - 1):
        for k, image in enumerate((front[step], wrist[step])):
            assert np.ptp(image) > 40  # lit objects on a lit table, not a blank view
            panel = video[step, 120 * k : 120 * (k + 1), 320:].astype(int)
            scaled = np.repeat(np.repeat(image, 15, axis=0), 15, axis=1)[::8, ::8]  # 120 px
            # mp4v is lossy and the name is drawn in the corner: close, not equal.
            assert np.abs(panel[20:] - scaled[20:].astype(int)).mean() < 12.0
    assert np.abs(front[frames - 1].astype(int) - front[0].astype(int)).mean() > 1.0  # it moves
    assert video[:, :, :320].reshape(frames, -1).std(axis=1).min() > 5.0  # the scene view too
