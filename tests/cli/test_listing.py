"""`unilab list tasks` shows each task's measured preset result from the bench JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from unilab.bench.task_results import NOT_MEASURED, TASK_RESULTS, task_result
from unilab.cli.listing import VERBS


def _write(path: Path, success: float, took: float, when: str) -> None:
    doc = {"machine": {"time_utc": when}, "final_success": success, "time_to_target_s": took}
    path.write_text(json.dumps(doc))


def test_result_line_is_read_from_the_bench_json(tmp_path: Path) -> None:
    assert task_result("arm_reach", tmp_path) == NOT_MEASURED
    _write(tmp_path / "learn_arm_reach.json", 0.875, 300.4, "2026-12-01T00:00:00+00:00")
    assert task_result("arm_reach", tmp_path) == "88 % success in 300 s (bench learn_arm_reach)"
    assert task_result("cartpole_balance", tmp_path) == NOT_MEASURED


def test_newest_of_several_result_files_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench, _, summary = TASK_RESULTS["arm_reach"]
    monkeypatch.setitem(TASK_RESULTS, "arm_reach", (bench, ("a.json", "b.json"), summary))
    _write(tmp_path / "a.json", 1.0, 100.0, "2026-12-02T00:00:00+00:00")
    _write(tmp_path / "b.json", 0.5, 900.0, "2026-12-01T00:00:00+00:00")
    assert task_result("arm_reach", tmp_path).startswith("100 % success in 100 s")


def test_a_result_without_the_expected_fields_is_named(tmp_path: Path) -> None:
    (tmp_path / "learn_arm_reach.json").write_text(json.dumps({"machine": {}}))
    assert "unreadable result learn_arm_reach.json" in task_result("arm_reach", tmp_path)


def test_list_tasks_prints_the_committed_results(capsys: pytest.CaptureFixture[str]) -> None:
    verb = VERBS[0]
    assert verb.arguments is not None and verb.run is not None
    parser = argparse.ArgumentParser()
    verb.arguments(parser)
    assert verb.run(parser.parse_args(["tasks"])) == 0
    out = capsys.readouterr().out
    reach = json.loads(
        (Path(__file__).parents[2] / "bench/results/learn_arm_reach.json").read_text()
    )
    expected = f"{reach['final_success']:.0%}".replace("%", " %")
    assert f"measured: {expected} success in {reach['time_to_target_s']:.0f} s" in out
    assert f"measured: {NOT_MEASURED}" in out  # tasks without a bench say so
