"""Run directories: runs started in the same second, even by processes that both saw the
name free, each get a directory of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from unilab.config import compose
from unilab.train import run_dir as run_dir_module
from unilab.train.run_dir import open_run_dir


def test_runs_started_in_the_same_second_get_their_own_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = compose(["task=cartpole_balance", f"run.out_dir={tmp_path}"])
    monkeypatch.setattr(run_dir_module.time, "strftime", lambda _fmt: "20261207-120000")
    # Another process checking at the same moment sees every name free: claiming a name
    # must not rest on an earlier existence check.
    monkeypatch.setattr(Path, "exists", lambda _self: False)
    paths = [open_run_dir(cfg).path for _ in range(3)]
    base = tmp_path / "cartpole_balance" / "ppo"
    assert paths == [
        base / "20261207-120000",
        base / "20261207-120000.1",
        base / "20261207-120000.2",
    ]
    assert all((p / "checkpoints").is_dir() for p in paths)
