"""`bench.learn_arm_reach` trains in this process through the Runner and its checkpoint hook
(no child process, no disk polling) and evaluates each checkpoint's policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_learn_arm_reach_runs_in_process_on_a_tiny_budget(tmp_path: Path) -> None:
    from bench import learn_arm_reach

    out = tmp_path / "learn.json"
    code = learn_arm_reach.main(
        [
            "--eval-envs",
            "4",
            "--out",
            str(out),
            f"run.out_dir={tmp_path}",
            "sim.num_envs=32",
            "runtime.chunk_len=32",  # 1,024 env steps per iteration
            "run.total_env_steps=4096",
            "run.checkpoint_every=2",
        ]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert [e["iteration"] for e in doc["evaluations"]] == [2, 4]
    walls = [e["wall_s"] for e in doc["evaluations"]]
    assert 0 < walls[0] < walls[1] <= doc["train_command_wall_s"]
    assert all(0.0 <= e["success"] <= 1.0 for e in doc["evaluations"])
