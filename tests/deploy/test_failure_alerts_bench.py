"""`unilab bench failure_alerts`: one evaluation per run (a seed each), scored at the live
rules and over the replayed sweep, precision read against the failure rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vla_run_helpers import vla_run

from unilab.bench import failure_alerts
from unilab.deploy.live_alerts import SWEEP_DEFAULT_STALL_S, SWEEP_DEFAULT_THRESHOLDS

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_the_bench_scores_each_seed_and_reads_precision_against_failures(
    tmp_path: Path,
) -> None:
    runs = [vla_run(tmp_path / f"r{s}", "algo.model.value_heads=true", seed=s) for s in (0, 1)]
    out = tmp_path / "alerts.json"
    argv = [*map(str, runs), "--episodes", "3", "--threshold", "1.0", "--out", str(out)]
    assert failure_alerts.main([*argv, "--note", "tiny"]) == 0
    doc = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    assert doc["notes"] == ["tiny"] and doc["live_rules"]["success_threshold"] == 1.0
    assert [r["seed"] for r in doc["rows"]] == [0, 1]
    for row, run in zip(doc["rows"], doc["runs"], strict=True):
        assert row["episodes"] == 3 and row["failure_rate"] == 1.0  # untrained: all fail
        # threshold 1.0 alerts every episode at its first step: precision = failure rate
        assert row["precision"] == 1.0 and row["lift"] == pytest.approx(1.0)
        assert row["alerted_episodes"] == 3 and row["recall"] == 1.0
        sweep = [(s["rule"], s["value"]) for s in run["sweep"]]
        assert sweep == [("low_success", t) for t in SWEEP_DEFAULT_THRESHOLDS] + [
            ("progress_stall", t) for t in SWEEP_DEFAULT_STALL_S
        ]
        assert [c["value"] for c in run["clock_baseline"]] == list(failure_alerts.BASELINE_TIMES_S)
    precisions = [r["precision"] for r in doc["rows"]]
    assert doc["ratios"]["mean_precision"] == pytest.approx(sum(precisions) / 2)


def test_a_run_without_value_heads_is_refused(tmp_path: Path) -> None:
    plain = vla_run(tmp_path / "plain")
    with pytest.raises(SystemExit, match="value_heads=false"):
        failure_alerts.main([str(plain), "--episodes", "2", "--out", str(tmp_path / "x.json")])


def test_the_clock_baseline_alerts_every_episode_still_running() -> None:
    rows = failure_alerts.clock_baseline(
        [1.0, 5.0, 9.0, 6.0], [False, True, True, False], (2.0, 7.0)
    )
    early, late = rows
    # at 2 s: episodes of 5, 9 and 6 s run on; two of them fail
    assert early["alerted_episodes"] == 3 and early["true_alerts"] == 2
    assert early["precision"] == pytest.approx(2 / 3) and early["recall"] == 1.0
    assert early["median_lead_s"] == pytest.approx(5.0)  # leads 3 s and 7 s
    # at 7 s only the 9-s failure runs on
    assert (late["precision"], late["recall"], late["median_lead_s"]) == (1.0, 0.5, 2.0)
