"""`unilab bench wm_gain`: the summary's paired differences by hand, and a tiny end-to-end
run of both arms (real only, real + synthetic) from the same start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unilab.bench.wm_gain import main, summarize

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_summary_pairs_the_arms_per_seed() -> None:
    per_seed = {
        0: {"arms": {"real": {"success": [0.2, 0.3, 0.4]}, "wm": {"success": [0.2, 0.5, 0.3]}}},
        1: {"arms": {"real": {"success": [0.4, 0.4, 0.6]}, "wm": {"success": [0.4, 0.3, 0.7]}}},
    }
    s = summarize(per_seed)
    assert s["real"]["mean"] == pytest.approx([0.3, 0.35, 0.5])
    assert s["wm"]["mean"] == pytest.approx([0.3, 0.4, 0.5])
    assert s["last_round_gain"]["per_seed"] == pytest.approx([-0.1, 0.1])
    assert s["last_round_gain"]["wm_ahead_seeds"] == 1 and s["last_round_gain"]["seeds"] == 2
    # best round after the start: seed 0 0.5 vs 0.4, seed 1 0.7 vs 0.6
    assert s["best_round_gain_mean"] == pytest.approx(0.1)


def test_quick_run_trains_both_arms_from_one_start(tmp_path: Path) -> None:
    out = tmp_path / "wm_gain.json"
    work = tmp_path / "runs"
    assert main(["--quick", "--seeds", "0", "--out", str(out), "--work", str(work)]) == 0
    doc = json.loads(out.read_text())
    seed = doc["seeds"]["0"]
    real, wm = seed["arms"]["real"], seed["arms"]["wm"]
    # one start: both arms evaluate the same VLA at round 0 with the same seed
    assert real["success"][0] == wm["success"][0]
    assert len(real["success"]) == len(wm["success"]) == 2
    assert real["synthetic"] == [None]
    (made,) = wm["synthetic"]
    assert made["generated"] == 3 and 0 <= made["kept"] <= 3
    loops = {arm: json.loads(Path(seed["arms"][arm]["loop"]).read_text()) for arm in ("real", "wm")}
    assert loops["real"]["world_model"] is None
    assert loops["wm"]["world_model"] == seed["world_model"]
    assert loops["real"]["start"] == loops["wm"]["start"] == seed["vla"]
    assert doc["summary"]["last_round_gain"]["per_seed"] == [
        pytest.approx(wm["success"][-1] - real["success"][-1])
    ]
