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


def test_learn_vla_collects_trains_and_evaluates_on_a_tiny_budget(tmp_path: Path) -> None:
    from unilab.bench import learn_vla

    out = tmp_path / "learn_vla.json"
    tiny = [
        "task.cameras=[front]",
        "task.image_size=16",
        "algo.steps=8",
        "algo.batch_size=8",
        "algo.val_every=4",
        "run.checkpoint_every=4",
        "run.export=false",
        "logging.tensorboard=false",
        "runtime.learner_threads=1",
        "algo.model.width=16",
        "algo.model.heads=2",
        "algo.model.image_channels=[8]",
        "algo.model.image_tokens_side=2",
        "algo.model.horizon=4",
        "algo.model.n_act=2",
        "algo.model.num_steps=2",
        "algo.model.prefix_layers=0",
        "algo.model.expert_layers=1",
    ]
    args = ["--episodes", "3", "--eval-episodes", "2", "--curve-episodes", "2"]
    args += ["--action-noise", "0.5", "--seeds", "0,1", "--jobs", "2"]
    assert learn_vla.main([*args, "--budget-s", "60", "--out", str(out), *tiny]) == 0
    doc = json.loads(out.read_text())
    assert doc["collected"]["episodes"] == 3 and doc["config"]["image_size"] == 16
    assert doc["collected"]["action_noise"] == 0.5 and doc["config"]["jobs"] == 2
    assert [r["seed"] for r in doc["runs"]] == [0, 1]
    for run in doc["runs"]:
        assert [c["step"] for c in run["curve"]] == [4, 8]
        assert 0.0 <= run["final_success"] <= 1.0 and 0.0 <= run["zero_action_success"] <= 1.0
    assert set(doc["ratios"]) == {
        "final_success_mean",
        "final_success_std",
        "final_success_min",
        "success_over_zero_action",
    }
    assert out.with_suffix(".png").stat().st_size > 0

    # --append: one more seed on the same store joins the same JSON; other settings are refused
    more = [*args[:-4], "--seeds", "2", "--store", doc["store"], "--budget-s", "60"]
    assert learn_vla.main([*more, "--out", str(out), "--append", *tiny]) == 0
    merged = json.loads(out.read_text())
    assert [r["seed"] for r in merged["runs"]] == [0, 1, 2]
    assert merged["runs"][:2] == doc["runs"] and merged["collected"] == doc["collected"]
    assert len(merged["bench_commands"]) == 2
    assert [r["jobs"] for r in merged["runs"]] == [2, 2, 1]
    finals = [r["final_success"] for r in merged["runs"]]
    assert merged["ratios"]["final_success_mean"] == pytest.approx(sum(finals) / 3)
    other = [*more, "--eval-episodes", "3", "--out", str(out), "--append", *tiny]
    with pytest.raises(SystemExit, match="another evaluation"):
        learn_vla.main(other)
    assert json.loads(out.read_text()) == merged  # nothing written by the refused run
