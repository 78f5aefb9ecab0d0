"""`unilab bench sim` end to end at tiny sizes: a real process, real gymnasium vector envs,
and the JSON that the decision record and CI read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_sim_writes_json_with_ratios(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    args = ["--num-envs", "4", "--horizon", "5", "--repeats", "1", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "unilab.cli", "bench", "sim", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "sim_vs_ceiling" in proc.stdout and f"wrote {out}" in proc.stdout
    doc = json.loads(out.read_text())
    assert {"sim_vs_ceiling", "sim_vs_gym_sync", "sim_vs_gym_async"} <= set(doc["ratios"])
    assert all(v > 0 for v in doc["ratios"].values())
    assert doc["machine"]["packages"]["mujoco"] and doc["machine"]["usable_cores"] >= 1
    assert doc["sizes"]["num_envs"] == 4 and doc["sizes"]["horizon"] == 5
    ant = doc["scenarios"]["ant"]
    assert ant["substeps"] == 5 and ant["obs_dims"] == {"policy": 105}
    for name in ("ceiling_1t", "unilab_1t", "gym_sync", "gym_async", "unilab_ant_v5_rules"):
        assert ant["rates"][name]["wall"]["best"] > 0, name
    assert ant["rates"]["unilab_1t"]["episode_ends_per_run"] == [0]  # nothing resets
    assert ant["rates"]["unilab_1t"]["cpu"]["best"] > 0 and ant["rates"]["gym_async"]["cpu"] is None
    assert doc["projected_idle"]["sim_vs_gym_sync"] > 0
    assert doc["scenarios"]["quadruped"]["substeps"] == 4
