"""`torchrun --nproc-per-node 2 -m unilab.cli train`: two gloo learner ranks, each with its
own sim worker; rank 0 alone writes the run directory, and resume continues it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from unilab.train.checkpoint import list_checkpoints

SMALL = [
    "task=cartpole_balance",
    "sim.num_envs=16",
    "runtime.num_workers=1",
    "runtime.chunk_len=16",
    "logging.tensorboard=false",
    "run.quiet=true",
    "run.export=false",
    "run.checkpoint_every=2",
]
STEPS_PER_ITERATION = 2 * 16 * 16  # two ranks, 16 envs, 16 steps


def _torchrun(*overrides: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return subprocess.run(
        [*cmd, "-m", "unilab.cli", "train", *SMALL, *overrides],
        capture_output=True,
        text=True,
        timeout=150,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_two_learner_ranks_train_with_rank0_owning_the_run_and_resume(tmp_path: Path) -> None:
    first = _torchrun(f"run.total_env_steps={4 * STEPS_PER_ITERATION}", f"run.out_dir={tmp_path}")
    assert first.returncode == 0, first.stderr[-3000:]
    runs = [p.parent for p in tmp_path.rglob("summary.json")]
    assert len(runs) == 1, runs  # only rank 0 made a run directory
    run = runs[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["iterations"] == 4
    assert summary["env_steps"] == 4 * STEPS_PER_ITERATION  # counted over both ranks
    assert [p.name for p in list_checkpoints(run / "checkpoints")][-1].startswith("ckpt_")

    second = _torchrun(f"resume={run}", f"run.total_env_steps={6 * STEPS_PER_ITERATION}")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["iterations"] == 6 and summary["env_steps"] == 6 * STEPS_PER_ITERATION
    assert len(list(tmp_path.rglob("summary.json"))) == 1
