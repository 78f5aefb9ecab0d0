"""Live failure alerts from the VLA's value heads in `unilab eval` and `unilab play`: the
eval report's `alerts` entry (precision, recall, lead times) follows from the alerts the
rules must raise, the schema check keeps it honest, and policies without value heads are
refused with a reason."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from vla_run_helpers import vla_run

from unilab.cli import main
from unilab.deploy.evaluate import EvalSchemaError, validate_report
from unilab.export.run_export import export_run

DT = 0.05  # arm tasks' control period (s); the helper's episodes last 1 s = 20 steps


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def value_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vla_run(tmp_path_factory.mktemp("runs"), "algo.model.value_heads=true")


def _eval(run: Path, out: Path, *extra: str) -> dict:
    argv = ["eval", str(run), "--episodes", "3", "--seeds", "0,1", "--out", str(out), *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


def test_eval_alerts_report_what_the_rules_raise(value_run: Path, tmp_path: Path) -> None:
    # threshold 1.0: P(success) < 1 at the first step, so every episode is alerted at 0 s
    report = _eval(value_run, tmp_path / "a.json", "--alerts", "--alert-threshold", "1.0")
    validate_report(report)
    a = report["alerts"]
    failed = sum(not e["success"] for e in report["episodes"])
    assert report["num_episodes"] == 6 and failed == 6  # an untrained policy fails
    assert (a["alerted_episodes"], a["failed_episodes"], a["true_alerts"]) == (6, 6, 6)
    assert a["precision"] == 1.0 and a["recall"] == 1.0
    lengths = [e["length"] * DT for e in report["episodes"]]
    assert a["mean_lead_s"] == pytest.approx(sum(lengths) / 6)  # alert at 0 s: lead = length
    assert a["by_kind"]["low_success"] == 6
    assert a["predictions"] >= 6 * 20 // 4  # one per env per re-plan (n_act 4 of 20 steps)
    assert a["success_threshold"] == 1.0 and a["stall_seconds"] == 5.0

    # threshold 0 and a stall longer than the episode: no alert can fire
    quiet = _eval(value_run, tmp_path / "b.json", "--alerts", "--alert-threshold", "0")
    q = quiet["alerts"]
    assert (q["alerted_episodes"], q["true_alerts"], q["failed_episodes"]) == (0, 0, 6)
    assert q["precision"] is None and q["recall"] == 0.0 and q["mean_lead_s"] is None

    # a 0.5 s stall and no success alert: stalls only, at >= 0.5 s, so leads <= 0.5 s
    stall = _eval(
        value_run, tmp_path / "c.json", "--alerts", "--alert-threshold", "0",
        "--alert-stall-s", "0.5",
    )["alerts"]  # fmt: skip
    assert stall["by_kind"]["low_success"] == 0 and stall["by_kind"]["progress_stall"] >= 1
    assert stall["precision"] == 1.0 and 0.0 <= stall["recall"] <= 1.0
    assert 0.0 <= stall["median_lead_s"] <= 0.5 + 1e-9
    # without --alerts the report has no alerts entry (the schema's optional key)
    assert "alerts" not in _eval(value_run, tmp_path / "d.json")


def test_the_schema_check_rejects_a_broken_alerts_entry(value_run: Path, tmp_path: Path) -> None:
    report = _eval(value_run, tmp_path / "a.json", "--alerts", "--alert-threshold", "1.0")
    for key, value, problem in [
        ("precision", 1.5, "alerts.precision"),
        ("mean_lead_s", -1.0, "alerts.mean_lead_s"),
        ("true_alerts", 7, "true_alerts exceeds"),
        ("failed_episodes", -1, "alerts.failed_episodes"),
    ]:
        broken = copy.deepcopy(report)
        broken["alerts"][key] = value
        with pytest.raises(EvalSchemaError, match=problem):
            validate_report(broken)


def test_alerts_need_value_heads(
    value_run: Path, trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = vla_run(tmp_path / "plain")
    cases = [
        (plain, "trained without them (algo.model.value_heads=false)"),
        (trained_run, "GaussianActor has none"),
    ]
    export_run(value_run)
    cases.append((value_run / "export" / "policy.onnx", "holds only the action path"))
    for target, why in cases:
        capsys.readouterr()
        assert main(["eval", str(target), "--episodes", "2", "--alerts"]) == 2
        err = capsys.readouterr().err
        assert "--alerts: failure alerts need" in err and why in err
    assert main(["play", str(plain), "--no-video", "--alerts", "--out", str(tmp_path)]) == 2
    assert "value_heads=false" in capsys.readouterr().err


def test_play_prints_and_records_alerts(
    value_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "play", str(value_run), "--episodes", "2", "--no-video", "--alerts",
        "--alert-threshold", "1.0", "--out", str(tmp_path), "--name", "p",
    ]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    printed = [line for line in captured.err.splitlines() if line.startswith("alert env")]
    assert printed == [
        "alert env 0 episode 0 at 0.00 s: " + printed[0].split(": ", 1)[1],
        "alert env 1 episode 0 at 0.00 s: " + printed[1].split(": ", 1)[1],
    ]
    assert all("low_success (P(success) " in line for line in printed)
    assert "2 failure alerts" in captured.out
    summary = json.loads((tmp_path / "media" / "p.json").read_text())
    assert [(a["env"], a["kind"], a["step"]) for a in summary["alerts"]] == [
        (0, "low_success", 0),
        (1, "low_success", 0),
    ]
    assert (tmp_path / "media" / "p.rrd").stat().st_size > 0


def test_the_sweep_replays_each_rule_as_a_live_run_would(value_run: Path, tmp_path: Path) -> None:
    """Every sweep row (one rule alone, replayed from the recorded predictions) scores the
    same as a live evaluation of the same episodes with that rule alone."""
    from unilab.cli.play import load_target
    from unilab.deploy.evaluate import evaluate
    from unilab.deploy.live_alerts import AlertOptions
    from unilab.deploy.sim_task import configs_for_policy

    policy = load_target(str(value_run), "eval")
    task_cfg, sim_cfg = configs_for_policy(
        policy.metadata.task_config, policy.metadata.sim_config, []
    )

    def alerts(options: AlertOptions) -> dict:
        report = evaluate(policy, task_cfg, sim_cfg, episodes=3, seeds=(0, 1), alerts=options)
        validate_report(report)
        return report["alerts"]

    never = 1e6  # a stall no 1-s episode reaches
    swept = alerts(AlertOptions(sweep_thresholds=(0.0, 0.5, 1.0), sweep_stall_s=(0.25, 0.5)))
    rows = {(r["rule"], r["value"]): r for r in swept["sweep"]}
    assert len(rows) == 5
    scores = ("precision", "recall", "median_lead_s", "alerted_episodes", "true_alerts")
    for threshold in (0.0, 0.5, 1.0):
        live = alerts(AlertOptions(success_threshold=threshold, stall_seconds=never))
        row = rows[("low_success", threshold)]
        assert {k: row[k] for k in scores} == {k: live[k] for k in scores}, threshold
    for seconds in (0.25, 0.5):
        live = alerts(AlertOptions(success_threshold=0.0, stall_seconds=seconds))
        row = rows[("progress_stall", seconds)]
        assert {k: row[k] for k in scores} == {k: live[k] for k in scores}, seconds
    assert rows[("low_success", 1.0)]["alerted_episodes"] == 6  # P < 1 at the first step
    assert rows[("low_success", 0.0)]["alerted_episodes"] == 0
    assert rows[("progress_stall", 0.25)]["alerted_episodes"] >= 1

    broken = copy.deepcopy(swept)
    broken["sweep"][0]["precision"] = 2.0
    with pytest.raises(EvalSchemaError, match=r"alerts\.sweep\[0\]\.precision"):
        validate_report({**_eval(value_run, tmp_path / "a.json"), "alerts": broken})


def test_the_sweep_flag_needs_alerts_and_fills_the_report(
    value_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(value_run), "--episodes", "2", "--alert-sweep"]) == 2
    assert "--alert-sweep needs --alerts" in capsys.readouterr().err
    report = _eval(value_run, tmp_path / "s.json", "--alerts", "--alert-sweep")
    rules = [(r["rule"], r["value"]) for r in report["alerts"]["sweep"]]
    assert rules[0] == ("low_success", 0.05) and rules[-1] == ("progress_stall", 8.0)
    assert report["alerts"]["scored_episodes"] == 6
