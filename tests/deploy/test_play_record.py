"""`unilab play <run> record=<store>` appends the played episodes to an episode store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from unilab.data.store import EpisodeStore


def test_play_records_whole_episodes(trained_run: Path, tmp_path: Path) -> None:
    store_path = tmp_path / "played.zarr"
    # Options before and after the key=value override, as people type them (issue 11).
    cmd = [sys.executable, "-m", "unilab.cli", "play", str(trained_run), "--episodes", "2"]
    cmd += [f"record={store_path}", "--envs", "2", "--no-video", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"to {store_path}" in proc.stdout
    summary = json.loads(next((tmp_path / "media").glob("*.json")).read_text())
    with EpisodeStore.open(store_path) as store:
        assert len(store) == len(summary["recorded_episodes"]) >= 2
        lengths = sorted(int(n) for n in store.lengths)
        assert lengths == sorted(e["length"] for e in summary["episodes"])[: len(lengths)]
        ep = store.episode(0)
        assert ep["obs/policy"].shape == (len(ep["action"]), 5)
        assert np.isfinite(ep["obs/policy"]).all()
        last = ep["terminated"][-1] or ep["truncated"][-1]
        assert last and not (ep["terminated"][:-1].any() or ep["truncated"][:-1].any())
        assert store.meta(0).task == "cartpole_balance"


def test_one_episode_per_env_records_exactly_the_first_episodes(tmp_path: Path) -> None:
    from unilab.config import compose
    from unilab.deploy.play import ExpertSource, play

    cfg = compose(["task=arm_move_side", "task.cameras=[]", "task.state_policy=true"])
    store_path = tmp_path / "first.zarr"
    result = play(
        ExpertSource(), cfg.task, cfg.sim, tmp_path, "p", episodes=6, one_per_env=True,
        seed=3, video=False, rerun=False, record=store_path,
    )  # fmt: skip
    lengths = [e["length"] for e in result.episodes]
    assert len(lengths) == 6 and result.num_envs == 6
    with EpisodeStore.open(store_path) as store:
        assert sorted(int(n) for n in store.lengths) == sorted(lengths)
        # An episode's last frame keeps the action its step executed, not the zeros the
        # reset leaves for the next episode's `previous_action`: the expert commands its
        # gripper open or closed (+-1) at every step, the last one included.
        for k in range(len(store)):
            gripper = store.episode(k)["action"][:, -1]
            assert (np.abs(gripper) == 1.0).all(), gripper[-3:]
    for envs in (3, 8):  # too few envs, or more (which would count the quickest episodes)
        try:
            play(ExpertSource(), cfg.task, cfg.sim, tmp_path, "q", episodes=6, num_envs=envs,
                 one_per_env=True, video=False, rerun=False)  # fmt: skip
        except ValueError as err:
            assert f"6 episodes need 6 envs, not {envs}" in str(err)
        else:
            raise AssertionError(f"one episode per env with {envs} envs was accepted")


def test_the_recorder_drops_episodes_that_end_where_keep_is_false(tmp_path: Path) -> None:
    """How one episode per env is recorded: env 0 finishes its first episode at step 1 and
    a second at step 3 (keep False by then), env 1 its first at step 3."""
    from unilab.data.play_recorder import PlayRecorder

    recorder = PlayRecorder(
        tmp_path / "keep.zarr", {"policy": ((2,), "float32")}, 1, 2, fps=10.0, meta={}
    )
    keep = np.ones(2, dtype=bool)
    ends = [(False, False), (True, False), (False, False), (True, True)]
    for step, done in enumerate(ends):
        d = np.array(done)
        recorder.add(
            {"policy": np.full((2, 2), step, np.float32)}, np.zeros((2, 1), np.float32),
            np.zeros(2, np.float32), d, np.zeros(2, bool), success=d.astype(np.float32),
            keep=keep,
        )  # fmt: skip
        keep = keep & ~d
    recorder.close()
    with EpisodeStore.open(tmp_path / "keep.zarr") as store:
        assert sorted(int(n) for n in store.lengths) == [2, 4]  # env 0's first, env 1's
