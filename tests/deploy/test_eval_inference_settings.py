"""`unilab eval` / `unilab play --inference-settings FILE`: a flow VLA runs with the settings
of a tune report (its recommendation) or of a plain {setting: value} object, and the eval
report says so; settings it cannot use, or beside the flags they replace, are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vla_run_helpers import vla_run

from unilab.cli import main


@pytest.fixture(scope="module")
def flow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vla_run(tmp_path_factory.mktemp("eval_settings"))  # n_act 4, K 2


def _eval(run: Path, settings: Path, out: Path, *extra: str) -> int:
    argv = ["eval", str(run), "--episodes", "2", "--inference-settings", str(settings)]
    return main([*argv, "--out", str(out), *extra])


def test_eval_runs_and_reports_the_given_settings(flow_run: Path, tmp_path: Path) -> None:
    want = {"n_act": 1, "ensemble_decay": 0.5, "flow_steps": 3, "noise_temperature": 0.5}
    plain = tmp_path / "settings.json"
    plain.write_text(json.dumps(want))
    out = tmp_path / "plain.json"
    assert _eval(flow_run, plain, out) == 0
    execution = json.loads(out.read_text())["execution"]
    assert execution["inference_settings"] == want
    assert (execution["n_act"], execution["ensemble_decay"], execution["flow_steps"]) == (1, 0.5, 3)
    # a tune report: its recommendation, not the bandit's unchecked choice
    report = {
        "schema": "unilab.tune_inference/1",
        "chosen": {"n_act": 2},
        "recommended": {"n_act": 3},
    }
    tuned = tmp_path / "tune.json"
    tuned.write_text(json.dumps(report))
    assert _eval(flow_run, tuned, out) == 0
    assert json.loads(out.read_text())["execution"]["n_act"] == 3
    video = tmp_path / "play"
    argv = ["play", str(flow_run), "--inference-settings", str(plain), "--out", str(video)]
    assert main([*argv, "--no-video"]) == 0
    assert any((video / "media").glob("*.rrd"))  # played to the end with them


def test_unusable_or_doubled_settings_are_refused(
    flow_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "settings.json"
    out = tmp_path / "never.json"
    settings.write_text(json.dumps({"n_act": 2}))
    assert _eval(flow_run, settings, out, "--n-act", "4") == 2
    assert "drop --n-act" in capsys.readouterr().err
    settings.write_text(json.dumps({"best_of_n": 2}))  # no value heads to rank candidates
    assert _eval(flow_run, settings, out) == 2
    assert "best_of_n" in capsys.readouterr().err
    settings.write_text(json.dumps({"speed": 2}))
    assert _eval(flow_run, settings, out) == 2
    assert "unknown inference settings ['speed']" in capsys.readouterr().err
    assert not out.exists()


def test_alerts_run_beside_tuned_settings(tmp_path: Path) -> None:
    run = vla_run(tmp_path / "runs", "algo.model.value_heads=true")
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"n_act": 2, "noise_temperature": 0.5}))
    out = tmp_path / "alerts.json"
    assert _eval(run, settings, out, "--alerts", "--alert-threshold", "1.0") == 0
    report = json.loads(out.read_text())
    assert report["execution"]["n_act"] == 2  # the tuned executor re-plans every 2 actions
    # threshold 1.0: every failed episode is alerted, read through the tuned wrapper
    assert report["alerts"]["alerted_episodes"] == report["alerts"]["failed_episodes"] > 0
