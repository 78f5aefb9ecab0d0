"""`export_to_lerobot(overwrite=True)` never deletes the old dataset before the new one is
complete and in its place: a failure injected mid-export leaves the old dataset loading in
LeRobot, and no temporary directory behind. (The swap itself is tested without lerobot in
tests/data/test_dirswap.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot_helpers import make_store

from unilab.data import lerobot_io
from unilab.data.lerobot_io import export_to_lerobot

pytestmark = pytest.mark.lerobot


def test_failed_overwrite_keeps_the_old_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_store(tmp_path / "old.zarr", episodes=2)
    make_store(tmp_path / "new.zarr", episodes=3)
    first = export_to_lerobot(tmp_path / "old.zarr", tmp_path / "lr", "u/a", images="image")
    real_add = lerobot_io._add_episode
    added = []

    def add_then_fail(*args: Any, **kwargs: Any) -> int:
        if len(added) == 1:
            raise OSError("disk full (injected) while exporting episode 1")
        added.append(1)
        return real_add(*args, **kwargs)

    monkeypatch.setattr(lerobot_io, "_add_episode", add_then_fail)
    with pytest.raises(OSError, match="injected"):
        export_to_lerobot(
            tmp_path / "new.zarr", tmp_path / "lr", "u/a", images="image", overwrite=True
        )
    assert [p.name for p in first.path.parent.iterdir()] == ["a"]  # no temp dir left
    assert LeRobotDataset("u/a", root=first.path).num_episodes == 2
    monkeypatch.setattr(lerobot_io, "_add_episode", real_add)
    export_to_lerobot(tmp_path / "new.zarr", tmp_path / "lr", "u/a", images="image", overwrite=True)
    assert LeRobotDataset("u/a", root=first.path).num_episodes == 3
    assert [p.name for p in first.path.parent.iterdir()] == ["a"]
