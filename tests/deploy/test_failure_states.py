"""Failure states: `unilab eval --save-failures` keeps the state shortly before each failure,
and `--from-states` restarts envs there; the same actions then fail again, identically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from unilab.cli import main
from unilab.deploy.evaluate import evaluate, validate_report
from unilab.deploy.failure_states import INDEX, load_states, restore_states
from unilab.deploy.policy_source import load_policy
from unilab.deploy.sim_task import configs_for_policy
from unilab.tasks.registry import make_task


def _eval(target: Path, **kwargs: Any) -> dict[str, Any]:
    policy = load_policy(target)
    meta = policy.metadata
    task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, [])
    return evaluate(policy, task_cfg, sim_cfg, **kwargs)


def test_each_failure_saves_the_state_between_one_and_two_lags_before_its_end(
    trained_onnx: Path, tmp_path: Path
) -> None:
    out = tmp_path / "fails"
    report = _eval(
        trained_onnx, episodes=6, seeds=[0, 1], kind="zero", save_failures=out, before_s=0.3
    )
    validate_report(report)
    failed = [e for e in report["episodes"] if not e["success"]]
    assert len(failed) == 12  # a zero force never balances the pole
    index = json.loads((out / INDEX).read_text())
    assert report["failure_states"] == {"dir": str(out), "before_s": 0.3, "count": 12}
    assert index["task"] == "cartpole_balance" and index["policy"] == "zero"
    lag = 15  # 0.3 s at cart-pole's 0.02 s control step
    by_key = {(e["seed"], e["env"]): e for e in failed}
    for row in index["states"]:
        episode = by_key[(row["seed"], row["env"])]
        assert row["end_step"] == episode["length"]
        assert row["reasons"] == episode["reasons"]
        assert lag <= row["end_step"] - row["state_step"] < 2 * lag, row
        assert (out / row["file"]).is_file()
    assert len(load_states(out)) == 12


def test_restored_failure_states_fail_again_at_the_same_step(
    trained_onnx: Path, tmp_path: Path
) -> None:
    out = tmp_path / "fails"
    _eval(trained_onnx, episodes=5, seeds=[3], kind="zero", save_failures=out, before_s=0.2)
    rows = json.loads((out / INDEX).read_text())["states"]
    again = _eval(
        trained_onnx,
        episodes=5,
        seeds=[7],  # another seed: the restored states, not the seed, decide the episodes
        kind="zero",
        start_states=load_states(out),
        start_source=str(out),
    )
    assert again["start_states"] == {"source": str(out), "count": 5}
    assert sorted(e["env"] for e in again["episodes"]) == list(range(5))
    for episode in again["episodes"]:
        row = rows[episode["env"]]  # env i restarted from the i-th state of the index
        assert episode["length"] == row["end_step"]
        assert episode["reasons"] == row["reasons"]


def test_restore_states_cycles_through_the_states(trained_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "fails"
    _eval(trained_onnx, episodes=2, seeds=[0], kind="zero", save_failures=out, before_s=0.1)
    states = load_states(out)
    policy = load_policy(trained_onnx)
    task_cfg, sim_cfg = configs_for_policy(
        policy.metadata.task_config, policy.metadata.sim_config, []
    )
    task = make_task(task_cfg, num_envs=5, seed=0, sim_cfg=sim_cfg)
    task.reset()
    obs = restore_states(task, states)
    policy_obs = obs["policy"]
    for env in range(5):
        source = env % len(states)
        np.testing.assert_array_equal(policy_obs[env], policy_obs[source])
        assert task.episode_step[env] == states[source].arrays["episode_step"]


def test_eval_cli_saves_failures_and_evaluates_from_them(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fails, report = tmp_path / "fails", tmp_path / "from.json"
    saving = ["--policy", "zero", "--episodes", "4", "--save-failures", str(fails)]
    assert main(["eval", str(trained_run), *saving]) == 0
    assert "failure states:" in capsys.readouterr().err
    starting = ["--episodes", "4", "--from-states", str(fails), "--out", str(report)]
    assert main(["eval", str(trained_run), *starting]) == 0
    assert json.loads(report.read_text())["start_states"]["source"] == str(fails)


def test_from_states_names_the_problem(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["eval", str(trained_run), "--from-states", str(empty)]) == 2
    assert "holds no env states" in capsys.readouterr().err
    assert main(["eval", str(trained_run), "--from-states", str(tmp_path / "nope")]) == 2
    assert "no env state file or directory" in capsys.readouterr().err
