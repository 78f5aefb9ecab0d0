"""`unilab bench learn_flow_ppo --runs`: per-seed pairing of the arms and the imitation
reference (the null arm's first evaluation), on run directories written here."""

from __future__ import annotations

import json
from pathlib import Path

from unilab.bench import learn_flow_ppo


def fake_run(root: Path, seed: int, curve: list[tuple[int, float]]) -> Path:
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(f"run:\n  seed: {seed}\neval:\n  seed: 12345\n")
    lines = [json.dumps({"env_steps": s, "eval/success_rate": v}) for s, v in curve]
    lines.insert(1, json.dumps({"env_steps": 1, "train/loss": 0.5}))  # rows without eval
    (root / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_runs_pair_by_their_seed_and_measure_against_the_null_start(tmp_path: Path) -> None:
    # Given out of seed order: pairing must follow the runs' own seeds, not the list order.
    tok = [
        fake_run(tmp_path / "t7", 7, [(100, 0.50), (200, 0.58), (300, 0.62)]),
        fake_run(tmp_path / "t3", 3, [(100, 0.40), (200, 0.41), (300, 0.42)]),
    ]
    null = [
        fake_run(tmp_path / "n3", 3, [(100, 0.45), (200, 0.44), (300, 0.46)]),
        fake_run(tmp_path / "n7", 7, [(100, 0.45), (200, 0.46), (300, 0.40)]),
    ]
    out = tmp_path / "out.json"
    argv = ["--runs", "tokens=" + ",".join(map(str, tok)), "null=" + ",".join(map(str, null))]
    assert learn_flow_ppo.main([*argv, "--task", "x", "--out", str(out), "--note", "how"]) == 0
    doc = json.loads(out.read_text())
    assert doc["notes"] == ["how"]
    rows = {(r["arm"], r["seed"]): r for r in doc["rows"]}
    assert rows[("tokens", 7)]["bc_success"] == 0.45  # seed 7's null start
    assert rows[("tokens", 7)]["env_steps_to_bc_plus_10"] == 200  # 0.58 >= 0.55
    assert rows[("tokens", 7)]["env_steps_to_start_plus_10"] == 300  # 0.62 >= 0.60
    assert rows[("tokens", 3)]["env_steps_to_bc_plus_10"] is None
    ratios = doc["ratios"]
    assert ratios["seeds_paired"] == 2 and ratios["seeds_tokens_above_null"] == 1
    assert abs(ratios["tokens_minus_null_final"] - ((0.62 - 0.40) + (0.42 - 0.46)) / 2) < 1e-9
    assert ratios["tokens_seeds_reaching_bc_plus_10"] == 1
    assert ratios["null_seeds_reaching_bc_plus_10"] == 0
    assert out.with_suffix(".png").stat().st_size > 0
