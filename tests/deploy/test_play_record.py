"""`unilab play <run> record=<store>` appends the played episodes to an episode store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from unilab.data.store import EpisodeStore


def test_play_records_whole_episodes(trained_run: Path, tmp_path: Path) -> None:
    store_path = tmp_path / "played.zarr"
    # Options before and after the key=value override, as people type them (issue 11).
    cmd = [sys.executable, "-m", "unilab.cli", "play", str(trained_run), "--episodes", "2"]
    cmd += [f"record={store_path}", "--envs", "2", "--no-video", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"to {store_path}" in proc.stdout
    summary = json.loads(next((tmp_path / "media").glob("*.json")).read_text())
    with EpisodeStore.open(store_path) as store:
        assert len(store) == len(summary["recorded_episodes"]) >= 2
        lengths = sorted(int(n) for n in store.lengths)
        assert lengths == sorted(e["length"] for e in summary["episodes"])[: len(lengths)]
        ep = store.episode(0)
        assert ep["obs/policy"].shape == (len(ep["action"]), 5)
        assert np.isfinite(ep["obs/policy"]).all()
        last = ep["terminated"][-1] or ep["truncated"][-1]
        assert last and not (ep["terminated"][:-1].any() or ep["truncated"][:-1].any())
        assert store.meta(0).task == "cartpole_balance"
