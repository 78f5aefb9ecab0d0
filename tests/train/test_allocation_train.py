"""Reset-bin allocation through the real loop (sim workers as processes): the learner logs
per-bin probabilities that keep the floor, the workers draw episodes from them, resume with
thompson is bit-exact, and allocation without bins is refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.config import compose
from unilab.config.errors import ConfigError
from unilab.train import train
from unilab.train.checkpoint import list_checkpoints, load_checkpoint
from unilab.utils.metrics import read_metrics

BINS = 4
COMMON = [
    "task=arm_reach",
    "algo=ppo",
    "task.target_bins=[2,1,2]",
    "task.episode_length_s=0.3",  # 15 steps: episodes end inside every 16-step chunk
    "runtime.allocation=thompson",
    "runtime.allocation_floor=0.4",
    "sim.num_envs=16",
    "runtime.chunk_len=16",
    "logging.tensorboard=false",
    "run.quiet=true",
    "run.export=false",
    "run.seed=2",
]
STEPS = 16 * 16


def _final(run: Path) -> dict[str, torch.Tensor]:
    state = load_checkpoint(list_checkpoints(run / "checkpoints")[-1])
    return {k: v for k, v in state["algo"]["actor"].items()}


def test_thompson_allocation_logs_keeps_the_floor_and_resumes_bit_exactly(tmp_path: Path) -> None:
    n = 3
    common = [*COMMON, f"run.checkpoint_every={n}"]
    straight = train(
        compose([*common, f"run.total_env_steps={2 * n * STEPS}", f"run.out_dir={tmp_path / 'a'}"])
    )
    rows = read_metrics(straight.path / "metrics.jsonl")
    assert len(rows) == 2 * n
    for row in rows:
        probs = np.array([row[f"alloc/prob_{k}"] for k in range(BINS)])
        assert probs.sum() == pytest.approx(1.0, abs=1e-5)
        assert (probs >= 0.4 / BINS - 1e-6).all()
        assert min(row[f"alloc/success_{k}"] for k in range(BINS)) > 0.0
    episodes = sum(row[f"alloc/episodes_{k}"] for row in rows for k in range(BINS))
    assert episodes >= 2 * n * 16  # every env ends an episode in every chunk
    state = load_checkpoint(list_checkpoints(straight.path / "checkpoints")[-1])
    assert len(state["allocation"]["alpha"]) == BINS
    first = train(
        compose([*common, f"run.total_env_steps={n * STEPS}", f"run.out_dir={tmp_path / 'b'}"])
    )
    resumed = train(compose([f"resume={first.path}", f"run.total_env_steps={2 * n * STEPS}"]))
    a, b = _final(straight.path), _final(resumed.path)
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs after resume"
    got = read_metrics(resumed.path / "metrics.jsonl")[-1]
    assert got["alloc/prob_0"] == rows[-1]["alloc/prob_0"]


def test_allocation_without_reset_bins_is_refused(tmp_path: Path) -> None:
    cfg = compose(
        ["task=cartpole_balance", "runtime.allocation=thompson", f"run.out_dir={tmp_path}"]
    )
    with pytest.raises(ConfigError, match="reset bins"):
        train(cfg)
    assert not any(tmp_path.iterdir())


def test_async_mode_allocates_from_its_batches(tmp_path: Path) -> None:
    cfg = compose(
        [
            *COMMON,
            "runtime.mode=async",
            f"run.total_env_steps={4 * STEPS}",
            f"run.out_dir={tmp_path}",
        ]
    )
    rows = read_metrics(train(cfg).path / "metrics.jsonl")
    assert len(rows) >= 4
    assert sum(row[f"alloc/episodes_{k}"] for row in rows for k in range(BINS)) >= 4 * 16
    # the posteriors moved off the Beta(1, 1) prior once episodes were scored
    assert any(row[f"alloc/success_{k}"] != 0.5 for row in rows for k in range(BINS))
