"""`unilab bench segment_critic` end to end at tiny sizes: ground truth, critic, labels, curation,
three BC arms, JSON and PNG (tiny sizes: this checks the plumbing, not the numbers)."""

from __future__ import annotations

import json
from pathlib import Path


def test_segment_critic_quick_writes_json_and_png(tmp_path: Path) -> None:
    from unilab.bench import segment_critic

    out = tmp_path / "segment_critic.json"
    sizes = {"episodes": 24, "heldout": 8, "critic-steps": 100, "bc-steps": 50, "seeds": 1}
    argv = [a for k, v in sizes.items() for a in (f"--{k}", str(v))] + ["--eval-episodes", "4"]
    assert segment_critic.main([*argv, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (tmp_path / "segment_critic.png").stat().st_size > 0
    labels = doc["labels_heldout"]
    cm = labels["confusion"]["matrix"]
    assert sum(map(sum, cm)) == labels["frames"] > 0
    assert labels["accuracy"] == sum(cm[k][k] for k in range(5)) / labels["frames"]
    assert [r["training set"] for r in doc["rows"]] == ["all_frames", "curated", "oracle_curated"]
    rep = doc["replicates"][0]
    assert rep["curate"]["frames"] < rep["curate"]["source_frames"]
    assert all(0.0 <= s <= 1.0 for s in rep["success"].values())
    assert doc["settings"]["episodes"] == 24 and doc["command"].endswith(str(out))
