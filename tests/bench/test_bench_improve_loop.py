"""`unilab bench improve_loop --from`: per-loop rows, per-arm gains and the paired
difference to the demonstrations-only control, from `unilab improve` reports."""

import json
import math
from pathlib import Path

import pytest

from unilab.bench.improve_loop import main


def _loop(
    folder: Path, start: str, curve: list[float], taken: int | None, retune: bool = False
) -> Path:
    rounds = []
    for k, success in enumerate(curve[1:], start=1):
        rollouts: dict = {"episodes": 0 if taken is None else 10, "success_rate": None}
        if taken is not None:
            rollouts.update(steps=500, success_rate=0.4, takeover={"episodes": taken, "rescued": 2})
        rounds.append(
            {"round": k, "eval": {"success_rate": success, "episodes": 100}, "rollouts": rollouts}
        )
    report = {
        "schema": "unilab.improve/1",
        "start": start,
        "store": str(folder / "store.zarr"),
        "baseline": {"eval": {"success_rate": curve[0], "episodes": 100}},
        "rounds": rounds,
        "wall_s": 12.0,
        "retune": {"rounds": 30} if retune else None,
    }
    folder.mkdir(parents=True)
    (folder / "improve.json").write_text(json.dumps(report))
    return folder


def test_summary_pairs_each_arm_with_the_control_by_base(tmp_path: Path) -> None:
    bases = [f"/runs/arm_move_side/bc_flow/{s}" for s in ("a", "b")]
    tk = [
        _loop(tmp_path / "tk0", bases[0], [0.5, 0.6, 0.7], taken=5),
        _loop(tmp_path / "tk1", bases[1], [0.4, 0.5, 0.45], taken=4),
    ]
    ctl = [  # listed in the other order: pairing goes by base, not position
        _loop(tmp_path / "c1", bases[1], [0.4, 0.5, 0.5], taken=None),
        _loop(tmp_path / "c0", bases[0], [0.5, 0.55, 0.6], taken=None),
    ]
    out = tmp_path / "sum.json"
    argv = ["--from", "takeover=" + ",".join(map(str, tk))]
    argv += ["--from", "demos=" + ",".join(map(str, ctl)), "--out", str(out)]
    assert main([*argv, "--note", "one base"]) == 0
    doc = json.loads(out.read_text())
    assert doc["notes"] == ["one base"] and doc["command"] == " ".join(
        ["unilab bench improve_loop", *argv]
    )
    assert doc["task"] == "arm_move_side" and out.with_suffix(".png").stat().st_size > 1000
    first = doc["rows"][0]
    assert first["arm"] == "takeover" and first["curve"] == [0.5, 0.6, 0.7]
    assert first["gain"] == pytest.approx(0.2)
    assert first["gain_se"] == pytest.approx(math.sqrt((0.25 + 0.21) / 100))
    assert first["taken_over"] == [5, 5] and first["rollout_episodes"] == 20
    ratios = doc["ratios"]
    assert ratios["takeover_mean_curve"] == pytest.approx([0.45, 0.55, 0.575])
    assert ratios["takeover_mean_gain"] == pytest.approx((0.2 + 0.05) / 2)
    assert ratios["takeover_seeds_improved"] == 2 and ratios["demos_seeds_improved"] == 2
    # final success minus the control's from the same base: 0.7 - 0.6 and 0.45 - 0.5
    assert ratios["takeover_minus_demos_final"] == pytest.approx((0.1 - 0.05) / 2)
    assert ratios["takeover_seeds_above_demos"] == 1


def test_final_policies_at_tuned_settings_are_compared_per_base(tmp_path: Path) -> None:
    bases = [f"/runs/arm_move_to_goal/bc_flow/{s}" for s in ("a", "b")]
    retuned = [  # a retuned loop's evaluations are at its tuned settings already
        _loop(tmp_path / "r0", bases[0], [0.45, 0.5, 0.6], taken=None, retune=True),
        _loop(tmp_path / "r1", bases[1], [0.4, 0.4, 0.42], taken=None, retune=True),
    ]
    ctl = [
        _loop(tmp_path / "c0", bases[0], [0.45, 0.5, 0.5], taken=None),
        _loop(tmp_path / "c1", bases[1], [0.4, 0.45, 0.48], taken=None),
    ]
    evals = []
    for name, rate in (("e0", 0.52), ("e1", 0.47)):  # the controls' finals, re-tuned
        evals.append(tmp_path / f"{name}.json")
        evals[-1].write_text(json.dumps({"success_rate": rate, "execution": {"n_act": 2}}))
    out = tmp_path / "tuned.json"
    argv = ["--from", "retuned=" + ",".join(map(str, retuned))]
    argv += ["--from", "demos=" + ",".join(map(str, ctl))]
    assert (
        main([*argv, "--tuned-final", "demos=" + ",".join(map(str, evals)), "--out", str(out)]) == 0
    )
    doc = json.loads(out.read_text())
    assert [r["final_tuned"] for r in doc["rows"]] == [0.6, 0.42, 0.52, 0.47]
    ratios = doc["ratios"]
    assert ratios["retuned_minus_demos_final_tuned"] == pytest.approx((0.08 - 0.05) / 2)
    assert ratios["retuned_seeds_above_demos_tuned"] == 1 and ratios["retuned_tuned_pairs"] == 2
    assert ratios["demos_mean_final_tuned"] == pytest.approx(0.495)
    # one eval report per loop of the arm, or it is refused
    with pytest.raises(SystemExit):
        main([*argv, "--tuned-final", f"demos={evals[0]}", "--out", str(out)])


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main([])  # neither loops to run nor reports
    with pytest.raises(SystemExit):
        main(["--from", f"bogus={tmp_path}"])
    with pytest.raises(SystemExit):
        main(["--bases", "x", "--work", str(tmp_path), "--arms", "takeover,magic"])
