"""`bench.learn_locomotion` trains humanoid_walk / quadruped_joystick_rough through the real
training path for a few seconds, evaluates the final checkpoint and writes the metrics the
BENCHMARKS.md rows and `unilab list tasks` read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from unilab.bench import learn_locomotion
from unilab.bench.task_results import task_result

TINY = ["--minutes", "0.1", "--eval-seconds", "1.0", "--warmup-s", "0.2"]
"""About 6 s of training and 1 s evaluation episodes; warm-up short enough that an
untrained humanoid is still up for part of the measured steps."""
SMALL_RUN = ["sim.num_envs=16", "runtime.chunk_len=8"]


def _run(tmp_path: Path, task: str, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"  # the name task_result reads
    argv = ["--task", task, *TINY, "--out", str(out), f"run.out_dir={tmp_path}", *SMALL_RUN]
    assert learn_locomotion.main([*argv, *extra]) == 0
    assert out.with_suffix(".png").stat().st_size > 0
    doc: dict = json.loads(out.read_text())
    assert doc["benchmark"] == name and doc["task"] == task
    assert doc["env_steps"] > 0 and doc["env_steps_per_s"] > 0
    split = doc["time_split_s"]
    assert split["worker_sim_s"] > 0 and split["learner_update_s"] > 0
    ev = doc["evaluation"]
    assert ev["command"] == [0.5, 0.0, 0.0] and ev["command_in_training_range"]
    for key in ("mean_abs_vx_error", "mean_abs_vx_error_with_warmup", "mean_planar_vel_error"):
        assert math.isfinite(ev[key]) and ev[key] >= 0.0, key
    assert 0.0 <= ev["fall_rate"] <= 1.0 and ev["falls"] == round(ev["fall_rate"] * ev["episodes"])
    assert isinstance(doc["passed"], bool) and doc["passed"] == ev["passed"]
    assert doc["ratios"]["target_over_vx_error"] == pytest.approx(
        doc["target"]["mean_abs_vx_error_max"] / ev["mean_abs_vx_error"]
    )
    assert doc["rows"][0]["passed"] == doc["passed"]
    assert not any("|" in column for column in doc["rows"][0])  # markdown table cells
    return doc


def test_humanoid_reports_tracking_and_fall_rate_over_its_episodes(tmp_path: Path) -> None:
    doc = _run(tmp_path, "humanoid_walk", "learn_humanoid", "--eval-envs", "5")
    ev = doc["evaluation"]
    assert ev["episodes"] == 5 and ev["num_envs"] == 5
    assert 0.0 < ev["mean_episode_s"] <= 1.0 + 1e-9
    assert doc["curriculum"] is None
    assert doc["target"]["fall_rate_max"] == 0.05
    assert doc["ratios"]["episodes_without_fall"] == 1.0 - ev["fall_rate"]
    assert task_result("humanoid_walk", tmp_path).startswith("|vx error| ")


def test_rough_quadruped_reports_the_level_reached_and_tracking_on_the_hardest(
    tmp_path: Path,
) -> None:
    doc = _run(
        tmp_path,
        "quadruped_joystick_rough",
        "learn_quadruped_rough",
        "--eval-envs",
        "6",
        "task.terrain.num_levels=4",  # a smaller height field: faster to build
    )
    levels = doc["curriculum"]
    assert levels["metric"] == "task/terrain_level"
    assert levels["num_levels"] == 4 and levels["hardest_level"] == 3
    assert isinstance(levels["level_reached"], int) and 0 <= levels["level_reached"] <= 3
    assert 0.0 <= levels["final_mean_level"] <= levels["peak_mean_level"] <= 3.0
    assert 0.0 <= levels["final_top_fraction"] <= levels["peak_top_fraction"] <= 1.0
    assert isinstance(levels["graduations"], int) and levels["graduations"] >= 0
    assert all("terrain_level" in point and "terrain_top" in point for point in doc["curve"])
    ev = doc["evaluation"]
    assert ev["terrain_levels"] == [3]  # every evaluation env on the hardest level
    assert sum(kind["envs"] for kind in ev["by_terrain_kind"].values()) == 6
    assert doc["rows"][0]["level reached"] == levels["level_reached"]
    assert task_result("quadruped_joystick_rough", tmp_path).startswith("terrain level ")


def test_learn_quadruped_keeps_the_keys_of_its_committed_result(tmp_path: Path) -> None:
    from unilab.bench import learn_quadruped

    out = tmp_path / "learn_quadruped.json"
    argv = ["--minutes", "0.05", "--eval-envs", "2", "--eval-seconds", "1.5", "--out", str(out)]
    assert learn_quadruped.main([*argv, f"run.out_dir={tmp_path}", *SMALL_RUN]) == 0
    doc = json.loads(out.read_text())
    committed = Path(__file__).parents[2] / "bench/results/learn_quadruped.json"
    old = json.loads(committed.read_text())
    assert set(old) <= set(doc) and set(old["evaluation"]) <= set(doc["evaluation"])
    assert doc["benchmark"] == "learn_quadruped" and doc["task"] == "quadruped_joystick_flat"
    assert doc["target"] == old["target"] and doc["evaluation"]["command"] == [0.5, 0.0, 0.0]
    assert doc["curriculum"] is None and "episodes_without_fall" not in doc["ratios"]


def test_the_json_curve_is_thinned_but_keeps_its_ends() -> None:
    thinned = learn_locomotion.thinned
    curve = [{"env_steps": i} for i in range(5001)]
    kept = thinned(curve, most=500)
    assert len(kept) <= 501 and kept[0] is curve[0] and kept[-1] is curve[-1]
    assert [p["env_steps"] for p in kept] == sorted({p["env_steps"] for p in kept})
    assert thinned(curve[:10], most=500) == curve[:10]


def test_one_mastery_of_the_top_level_counts_as_reaching_it() -> None:
    # The mean level stays below the top when graduates restart on random levels.
    cfg = learn_locomotion.training_config(
        "quadruped_joystick_rough", 1.0, None, ["task.terrain.num_levels=5", "sim.num_envs=100"]
    )
    rows = [
        {"task/terrain_level": 1.0, "task/terrain_top": 0.0, "task/terrain_graduations": 0.0},
        {"task/terrain_level": 2.4, "task/terrain_top": 0.2, "task/terrain_graduations": 0.0},
    ]
    levels = learn_locomotion.curriculum(rows, cfg)
    assert levels is not None
    assert levels["level_reached"] == 2 and levels["graduations"] == 0
    rows.append(
        {"task/terrain_level": 2.1, "task/terrain_top": 0.1, "task/terrain_graduations": 0.03}
    )
    levels = learn_locomotion.curriculum(rows, cfg)
    assert levels is not None
    assert levels["level_reached"] == 4 and levels["graduations"] == 3
    assert levels["final_top_fraction"] == 0.1 and levels["peak_top_fraction"] == 0.2


def test_a_resumed_run_adds_its_masteries_to_those_before_the_restart() -> None:
    assert learn_locomotion.cumulative([0.0, 0.5, 1.2, 0.1, 0.4]) == 1.6
    assert learn_locomotion.cumulative([0.0, 0.0]) == 0.0


def test_the_curve_of_a_resumed_run_adds_the_sessions_wall_times() -> None:
    rows = [
        {"env_steps": 100, "train/wall_s": 10.0, "train/mean_return": 1.0},
        {"env_steps": 200, "train/wall_s": 20.0, "train/mean_return": 2.0},
        {"env_steps": 250, "train/wall_s": 4.0},  # resumed: the session clock restarts
        {"env_steps": 300, "train/wall_s": 9.0, "train/mean_return": 3.0},
    ]
    curve = learn_locomotion.learning_curve(rows)
    assert [p["wall_s"] for p in curve] == [10.0, 20.0, 24.0, 29.0]
    assert [p["env_steps"] for p in curve] == [100, 200, 250, 300]
