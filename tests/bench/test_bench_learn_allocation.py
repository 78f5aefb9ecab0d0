"""`bench.learn_allocation`: both allocation modes train a binned task through `train`, and
the summary counts a run that never reached the target at its whole budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unilab.bench.learn_allocation import main, paired, summarize


def _run(mode: str, seed: int, reached: int | None, budget: int) -> dict[str, object]:
    curve = [[budget // 2, 5.0, 0.1], [budget, 10.0, 0.2]]
    return {
        "mode": mode,
        "seed": seed,
        "steps_to_target": reached,
        "wall_s_to_target": None if reached is None else reached / 1000.0,
        "final_eval_success": 0.5,
        "curve": curve,
        "wall_s": 12.0,
    }


def test_an_unreached_run_counts_at_its_whole_budget_and_pairs_by_seed() -> None:
    runs = [
        _run("uniform", 0, None, 600),  # never reached: counts as 600 steps, 12 s
        _run("thompson", 0, 500, 600),
        _run("uniform", 1, 300, 600),
        _run("thompson", 1, 400, 600),
    ]
    table = summarize(runs, ["uniform", "thompson"])
    assert [row["reached"] for row in table] == [1, 2]
    assert table[0]["mean_steps_to_target"] == pytest.approx((600 + 300) / 2)
    assert table[0]["mean_wall_s_to_target"] == pytest.approx((12.0 + 0.3) / 2)
    assert table[1]["mean_steps_to_target"] == pytest.approx(450)
    counts = paired(runs, ["uniform", "thompson"])
    assert counts == {
        "seeds_compared": 2,
        "seeds_thompson_fewer_steps": 1,
        "seeds_thompson_less_wall": 1,
    }


def test_both_modes_train_cartpole_bins_and_the_result_resummarizes(tmp_path: Path) -> None:
    out = tmp_path / "alloc.json"
    argv = [
        "--task", "cartpole_balance", "--bins", "3", "--seeds", "0", "--steps", "4096",
        "--eval-every", "1", "--eval-episodes", "4", "--target", "0.9", "--out", str(out),
        "sim.num_envs=16", "runtime.chunk_len=64", "task.episode_length_s=0.5",
    ]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert [row["mode"] for row in doc["rows"]] == ["uniform", "thompson"]
    for run in doc["runs"]:
        assert len(run["bin_success"]) == len(run["bin_prob"]) == 3
        assert sum(run["bin_prob"]) == pytest.approx(1.0, abs=1e-5)
        assert run["curve"] and run["curve"][-1][0] >= 4096
    uniform = next(r for r in doc["runs"] if r["mode"] == "uniform")
    assert uniform["bin_prob"] == pytest.approx([1 / 3] * 3, abs=1e-6)
    assert doc["paired"]["seeds_compared"] == 1
    before = doc["rows"]
    assert main(["--summarize", str(out)]) == 0
    assert json.loads(out.read_text())["rows"] == before
    with pytest.raises(SystemExit):
        main(["--task", "humanoid_walk", "--out", str(tmp_path / "x.json")])
