"""`unilab bench tune_inference --from-reports`: the per-seed rows and the summary."""

import json
import math
from pathlib import Path

import pytest

from unilab.bench.tune_inference import main


def _report(seed: int, defaults: int, chosen: int, n: int = 40) -> dict:
    return {
        "schema": "unilab.tune_inference/1",
        "task": "arm_move_side",
        "source": "runs/x",
        "space": {"n_act": [2, 4]},
        "skipped": {},
        "defaults": {"n_act": 4},
        "chosen": {"n_act": 2},
        "rounds": [{"round": r, "seed": seed + r, "episodes": 8} for r in range(3)],
        "comparison": {
            "episodes_per_arm": n,
            "defaults": {"success_rate": defaults / n},
            "chosen": {"success_rate": chosen / n},
        },
    }


def test_summary_of_reports(tmp_path: Path) -> None:
    paths = []
    for seed, (d, c) in enumerate([(20, 30), (20, 18), (10, 14)]):
        paths.append(tmp_path / f"r{seed}.json")
        paths[-1].write_text(json.dumps(_report(seed, d, c)))
    out = tmp_path / "sum.json"
    assert main(["--from-reports", *map(str, paths), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["seed"] for r in doc["rows"]] == [0, 1, 2]
    assert doc["rows"][0]["difference"] == pytest.approx(0.25)
    assert doc["rows"][0]["difference_se"] == pytest.approx(math.sqrt((0.25 + 0.1875) / 40))
    assert doc["rows"][0]["tuning_episodes"] == 24
    assert doc["ratios"]["chosen_minus_defaults"] == pytest.approx((0.25 - 0.05 + 0.1) / 3)
    assert doc["ratios"]["seeds_chosen_better"] == 2
    assert doc["defaults"] == {"n_act": 4}


def test_needs_a_run_or_reports() -> None:
    with pytest.raises(SystemExit):
        main([])
