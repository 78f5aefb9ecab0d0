"""`unilab bench runtime` and `unilab bench e2e` in quick mode: they run end to end through
the CLI and write JSON with the ratios the results page reads (their speed is not judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def _bench(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "unilab.cli", "bench", *args, "--quick", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"wrote {out}" in proc.stdout
    return json.loads(out.read_text())


def test_runtime_quick_writes_ratios(tmp_path: Path) -> None:
    doc = _bench(tmp_path, "runtime", "--task", "cartpole_balance", "--envs-per-worker", "32")
    assert {
        "collect_vs_ceiling",
        "collect_vs_ceiling_w1",
        "collect_vs_ceiling_w2",
        "async_vs_sync_overlap",
    } <= set(doc["ratios"])
    assert all(v > 0 for v in doc["ratios"].values())
    assert doc["machine"]["usable_cores"] >= 1


def test_e2e_quick_writes_times_and_ratios(tmp_path: Path) -> None:
    doc = _bench(tmp_path, "e2e", "--target", "2.0")
    assert set(doc["times_to_target_s"]) == {"async", "async_ppo", "sync", "sb3"}
    assert doc["times_to_target_s"]["sync"][0] is not None  # a return of 2 is reached quickly
    assert "async_vs_sync_time_to_target" in doc["ratios"]
    assert "appo_vs_async_ppo_time_to_target" in doc["ratios"]
    steps = doc["env_steps_to_target"]["sync"][0]
    assert steps is not None and 0 < steps <= doc["budget_env_steps"]


def test_scaling_quick_and_report(tmp_path: Path) -> None:
    doc = _bench(tmp_path, "scaling", "--task", "cartpole_balance")
    assert {r["path"] for r in doc["rows"]} == {"ceiling", "unilab"}
    assert doc["ratios"]["scaling_efficiency_max_workers"] > 0
    results = tmp_path / "results"
    results.mkdir()
    (tmp_path / "result.json").rename(results / "scaling.json")
    page = tmp_path / "BENCHMARKS.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "unilab.cli",
            "bench",
            "report",
            "--results",
            str(results),
            "--out",
            str(page),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "scaling_efficiency_max_workers" in text and "unilab bench scaling" in text
