"""The real training loop (learner here, sim workers as processes) on cart-pole."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.config import compose
from unilab.data.store import EpisodeStore
from unilab.train import IterationInfo, Runner, RunResult, TrainHook, train
from unilab.train.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from unilab.utils.metrics import read_metrics
from unilab.workflows.train import train as train_with_tools

SMALL = [
    "sim.num_envs=16",
    "runtime.chunk_len=16",
    "logging.tensorboard=false",
    "run.quiet=true",
    "run.export=false",
]


def _final_params(run: Path) -> dict[str, torch.Tensor]:
    state = load_checkpoint(list_checkpoints(run / "checkpoints")[-1])
    params = {f"actor.{k}": v for k, v in state["algo"]["actor"].items()}
    params.update({f"critic.{k}": v for k, v in state["algo"]["critic"].items()})
    return params


def test_ppo_learns_cartpole_through_the_runtime(tmp_path: Path) -> None:
    cfg = compose(
        [
            "task=cartpole_balance",
            "algo=ppo",
            "sim.num_envs=64",
            "run.total_env_steps=61440",
            "run.quiet=true",
            f"run.out_dir={tmp_path}",
        ]
    )
    run = train_with_tools(cfg)
    rows = read_metrics(run.metrics)
    first = next(r["train/mean_return"] for r in rows if r["train/mean_return"] is not None)
    last = rows[-1]["train/mean_return"]
    # A random policy keeps the pole up for ~1 of 10 possible return; learning must show.
    assert first < 3.0
    assert last > 5.0, f"mean return after 60k steps: {last}"
    for sub in ("config.yaml", "metrics.jsonl", "checkpoints", "export", "media", "tb"):
        assert (run.path / sub).exists(), sub
    assert any((run.path / "tb").iterdir())
    assert (run.path / "summary.txt").read_text().startswith("done:")
    # the end of `unilab train`: exported policy, video and Rerun recording
    assert (run.path / "export" / "policy.onnx").stat().st_size > 0
    assert (run.path / "export" / "policy.pt").stat().st_size > 0
    assert list((run.path / "media").glob("*.mp4")) and list((run.path / "media").glob("*.rrd"))


def test_resume_is_bit_exact_in_sync_mode(tmp_path: Path) -> None:
    n = 3
    steps = 16 * 16  # one chunk of 16 envs x 16 steps per iteration
    common = [*SMALL, f"run.checkpoint_every={n}", "run.seed=3"]
    straight = train(
        compose([*common, f"run.total_env_steps={2 * n * steps}", f"run.out_dir={tmp_path / 'a'}"])
    )
    first = train(
        compose([*common, f"run.total_env_steps={n * steps}", f"run.out_dir={tmp_path / 'b'}"])
    )
    resumed = train(compose([f"resume={first.path}", f"run.total_env_steps={2 * n * steps}"]))
    assert resumed.path == first.path
    a, b = _final_params(straight.path), _final_params(resumed.path)
    assert load_checkpoint(list_checkpoints(resumed.path / "checkpoints")[-1])["iteration"] == 2 * n
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs after resume"
    # and the run really moved: parameters after 2N differ from those after N
    mid = load_checkpoint(list_checkpoints(first.path / "checkpoints")[0])["algo"]["actor"]
    assert any(not torch.equal(mid[k], a[f"actor.{k}"]) for k in mid)


def test_corrupt_checkpoint_is_named_and_resume_falls_back(tmp_path: Path) -> None:
    cfg = compose(
        [*SMALL, "run.checkpoint_every=2", "run.total_env_steps=1024", f"run.out_dir={tmp_path}"]
    )
    run = train(cfg)
    ckpts = list_checkpoints(run.checkpoints)
    assert len(ckpts) >= 2
    newest = ckpts[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # truncated write
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(newest)
    assert str(newest) in str(err.value) and "truncated or corrupt" in str(err.value)
    resumed = train(compose([f"resume={run.path}", "run.total_env_steps=1536"]))
    state = load_checkpoint(list_checkpoints(resumed.checkpoints)[-1])
    assert state["iteration"] > int(ckpts[-2].stem.split("_")[1])


def test_async_mode_respects_max_staleness(tmp_path: Path) -> None:
    cfg = compose(
        [
            *SMALL,
            "runtime.mode=async",
            "runtime.slots_per_worker=3",
            "algo.max_staleness=1",
            "run.total_env_steps=4096",
            f"run.out_dir={tmp_path}",
        ]
    )
    run = train(cfg)
    summary = json.loads((run.path / "summary.json").read_text())
    hist = {int(k): v for k, v in summary["staleness_hist"].items()}
    assert hist and max(hist) <= 1
    assert sum(hist.values()) == summary["iterations"]
    rows = read_metrics(run.metrics)
    assert all(np.isfinite(r["algo/policy_loss"]) for r in rows)


class CountingHook(TrainHook):
    name = "counting"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.checkpoints: list[int] = []

    def on_start(self, runner: Runner) -> None:
        self.calls.append("start")
        torch.rand(1000)  # hooks must not move the learner's random streams

    def on_iteration(self, runner: Runner, it: IterationInfo) -> None:
        self.calls.append(f"iteration {it.iteration}")
        assert it.host_batch is runner.runtime.host_batch if runner.runtime else False
        it.log["custom/iteration_twice"] = 2.0 * it.iteration

    def on_checkpoint(self, runner: Runner, path: Path) -> None:
        self.checkpoints.append(load_checkpoint(path)["iteration"])

    def on_end(self, runner: Runner, result: RunResult) -> None:
        self.calls.append(f"end {result.stop_reason} {result.iterations}")

    def close(self) -> None:
        self.calls.append("close")


def test_hooks_carry_recording_rerun_and_mid_run_evaluation(tmp_path: Path) -> None:
    """One pinned run with every standard hook attached (plus a custom one)."""
    cfg = compose(
        [
            *SMALL,
            "runtime.pin_cpus=true",
            "viz.rerun=true",
            "viz.every=2",
            "viz.steps=20",
            "eval.every=2",
            "eval.episodes=3",
            f"logging.record_store={tmp_path / 'store'}",
            "run.checkpoint_every=3",
            "run.total_env_steps=1024",
            f"run.out_dir={tmp_path}",
        ]
    )
    counting = CountingHook()
    run = train_with_tools(cfg, hooks=[counting])
    recordings = sorted(p.name for p in run.media.glob("train_*.rrd"))
    assert recordings == ["train_000000002.rrd", "train_000000004.rrd"]
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["profile_s"]["viz"] > 0 and summary["profile_s"]["eval"] > 0
    rows = read_metrics(run.metrics)
    evals = [r for r in rows if "eval/return_mean" in r]
    assert [r["train/iteration"] for r in evals] == [2, 4]
    assert all(r["eval/length_mean"] > 0 and np.isfinite(r["eval/return_mean"]) for r in evals)
    assert [r["custom/iteration_twice"] for r in rows] == [2.0, 4.0, 6.0, 8.0]
    assert counting.calls == [
        "start",
        *[f"iteration {i}" for i in (1, 2, 3, 4)],
        "end budget 4",
        "close",
    ]
    assert counting.checkpoints == [3, 4]  # every 3 iterations, and the final one
    store = EpisodeStore.open(tmp_path / "store")
    assert len(store) >= 1  # whole cart-pole episodes recorded out of the batches


def test_hooks_leave_the_learners_random_streams_alone(tmp_path: Path) -> None:
    import random

    runner = Runner(compose([*SMALL, f"run.out_dir={tmp_path}"]))  # built, not started
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    with runner._hook_section(CountingHook()):
        torch.rand(10), np.random.rand(10), random.random()
    assert torch.equal(torch.get_rng_state(), states[0])
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert random.getstate() == states[2]
