"""`unilab train algo=flow_ppo` through the real runtime: a sim worker process samples
chains with exploration tokens, the ring carries chains, tokens and episode outcomes
(NaN where no episode ended) past the chunk checks, the learner updates, and the run ends
with a checkpoint, an ONNX export whose graph holds the token selector, and metrics."""

from __future__ import annotations

import json
from pathlib import Path

from unilab.cli import main
from unilab.utils.checkpoint import list_checkpoints

TINY = [
    "algo.model.horizon=4", "algo.model.n_act=2", "algo.model.num_steps=3",
    "algo.model.width=32", "algo.model.heads=2", "algo.model.prefix_layers=1",
    "algo.model.expert_layers=1", "algo.model.n_tokens=2", "algo.critic_warmup=1",
]  # fmt: skip


def test_flow_ppo_trains_through_the_ring_with_tokens(tmp_path: Path) -> None:
    args = [
        "train", "task=cartpole_balance", "algo=flow_ppo", *TINY, "task.episode_length_s=0.5",
        "sim.num_envs=8", "runtime.chunk_len=16", "run.total_env_steps=512",
        f"run.out_dir={tmp_path}", "run.play_episodes=0", "eval.every=0", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    (run,) = list((tmp_path / "cartpole_balance" / "flow_ppo").iterdir())
    assert list_checkpoints(run / "checkpoints")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["algo/decisions"] > 0 and last["algo/actor_trained"] == 1.0
    probs = [last[f"algo/token_prob_{k}"] for k in range(2)]
    assert abs(sum(probs) - 1.0) < 1e-6
    meta = (run / "export" / "policy.onnx").read_bytes()
    assert b"token_selector" in meta


def test_flow_ppo_with_images_runs_async_and_reports_the_time_split(tmp_path: Path) -> None:
    """The image path end to end: the sim worker renders the camera, chunks of images,
    chains and tokens go through the ring in async mode, and the summary says where the
    time went, rendering apart from the physics."""
    args = [
        "train", "task=arm_move_side", "task.cameras=[front]", "task.image_size=32",
        "task.episode_length_s=1.0", "algo=flow_ppo", *TINY, "sim.num_envs=4",
        "runtime.mode=async", "runtime.chunk_len=16", "run.total_env_steps=192",
        f"run.out_dir={tmp_path}", "run.play_episodes=0", "eval.every=0", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    (run,) = list((tmp_path / "arm_move_side" / "flow_ppo").iterdir())
    summary = json.loads((run / "summary.json").read_text())
    workers = summary["workers"]
    assert workers["render_s"] > 0.0 and workers["sim_s"] > 0.0 and workers["inference_s"] > 0.0
    assert summary["env_steps"] >= 192
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["algo/actor_trained"] == 1.0 and rows[-1]["algo/decisions"] > 0
    text = (run / "summary.txt").read_text()
    assert "time split (s): workers render" in text and "learner update" in text
