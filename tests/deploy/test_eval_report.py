"""`unilab eval`: the JSON follows its schema, and the baselines score below the trained policy."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from unilab.cli import main
from unilab.deploy.evaluate import SCHEMA, EvalSchemaError, evaluate, validate_report
from unilab.deploy.policy_source import load_policy
from unilab.deploy.sim_task import configs_for_policy
from unilab.utils.checkpoint import load_checkpoint, save_checkpoint


def _eval(target: Path, kind: str, seeds: list[int], episodes: int = 8) -> dict[str, Any]:
    policy = load_policy(target)
    meta = policy.metadata
    task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, [])
    return evaluate(policy, task_cfg, sim_cfg, episodes=episodes, seeds=seeds, kind=kind)


def test_eval_cli_writes_a_report_that_follows_the_schema(
    trained_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "eval.json"
    code = main(
        ["eval", str(trained_run), "--episodes", "4", "--seeds", "0,1,2", "--out", str(out)]
    )
    assert code == 0
    report = json.loads(out.read_text())
    validate_report(report)
    assert report["schema"] == SCHEMA and report["policy"] == "trained"
    assert report["seeds"] == [0, 1, 2] and report["num_episodes"] == 12
    assert [s["seed"] for s in report["per_seed"]] == [0, 1, 2]
    # Cart-pole's success: balanced until the time limit, i.e. no termination reason.
    for episode in report["episodes"]:
        fell = {"pole_fell", "cart_out"} & set(episode["reasons"])
        assert episode["success"] == (not fell), episode
    # Every episode ends by time-out or a termination reason, and the counts add up.
    assert sum(report["termination_reasons"].values()) >= report["num_episodes"]
    assert report["length"]["max"] <= 500


def test_baselines_score_below_the_trained_policy(trained_onnx: Path) -> None:
    trained = _eval(trained_onnx, "trained", [0, 1])
    zero = _eval(trained_onnx, "zero", [0, 1])
    random = _eval(trained_onnx, "random", [0, 1])
    assert trained["return"]["mean"] > 8.0, trained["return"]
    for baseline in (zero, random):
        assert baseline["return"]["mean"] < trained["return"]["mean"] - 5.0
        assert baseline["termination_reasons"].get("pole_fell", 0) > 0
    assert trained["termination_reasons"].get("time_out", 0) == trained["num_episodes"]


def test_same_seeds_give_the_same_report(trained_onnx: Path) -> None:
    a, b = _eval(trained_onnx, "random", [3], 4), _eval(trained_onnx, "random", [3], 4)
    assert a["episodes"] == b["episodes"]


def _broken(report: dict[str, Any], edit: str) -> dict[str, Any]:
    bad = copy.deepcopy(report)
    if edit == "missing_return":
        del bad["return"]
    elif edit == "rate_out_of_range":
        bad["success_rate"] = 1.5
    elif edit == "episode_count":
        bad["episodes"] = bad["episodes"][:-1]
    elif edit == "string_length":
        bad["episodes"][0]["length"] = "long"
    elif edit == "schema":
        bad["schema"] = "other/2"
    elif edit == "nan_metric":
        bad["metrics"] = {"distance": float("nan")}
    return bad


@pytest.mark.parametrize(
    "edit",
    [
        "missing_return",
        "rate_out_of_range",
        "episode_count",
        "string_length",
        "schema",
        "nan_metric",
    ],
)
def test_validator_rejects_reports_that_break_the_schema(trained_onnx: Path, edit: str) -> None:
    report = _eval(trained_onnx, "zero", [0], 2)
    validate_report(report)
    with pytest.raises(EvalSchemaError):
        validate_report(_broken(report, edit))


def test_eval_bad_input_is_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(tmp_path / "nowhere")]) == 2
    assert "no run directory or policy file" in capsys.readouterr().err
    assert main(["eval", str(tmp_path), "--seeds", "a,b"]) == 2


def test_an_earlier_checkpoint_of_a_run_loads_and_evaluates(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (latest_file,) = sorted((run / "checkpoints").glob("*.pt"))
    state = load_checkpoint(latest_file)
    state["iteration"] = 10  # an earlier checkpoint, as training keeps them
    earlier_file = save_checkpoint(run / "checkpoints", 10, state, keep=0)
    earlier, latest = load_policy(earlier_file), load_policy(run)
    assert earlier.source == str(earlier_file) and latest.source == str(latest_file)
    assert earlier.metadata.checkpoint["iteration"] == 10
    assert latest.metadata.checkpoint["iteration"] > 10  # a run directory: the newest
    out = tmp_path / "eval.json"
    assert main(["eval", str(earlier_file), "--episodes", "2", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["num_episodes"] == 2
    stray = tmp_path / "weights.pt"
    stray.write_bytes(latest_file.read_bytes())
    assert main(["eval", str(stray)]) == 2
    assert "checkpoints/*.pt" in capsys.readouterr().err
