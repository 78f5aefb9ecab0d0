"""FrameDataset(outcome_targets=True): the value heads' per-frame targets from episode
success metadata and timestamps, on a real store with successful and failed episodes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from unilab.data import EpisodeStore, SchemaMismatchError, StoreSchema
from unilab.data.dataset import FrameDataset

SCHEMA = StoreSchema.build(obs={"policy": 2}, action=1)


def episode(n: int, timestamps: list[float] | None = None) -> dict[str, np.ndarray]:
    frames = {
        "obs/policy": np.zeros((n, 2), np.float32),
        "action": np.zeros((n, 1), np.float32),
        "reward": np.zeros(n, np.float32),
        "terminated": np.arange(n) == n - 1,
        "truncated": np.zeros(n, bool),
        "origin": np.zeros(n, np.uint8),
    }
    if timestamps is not None:
        frames["timestamp"] = np.asarray(timestamps)
    return frames


def write(path: Path, episodes: list[tuple[dict[str, np.ndarray], dict[str, object]]]) -> Path:
    with EpisodeStore.create(path, SCHEMA) as store:
        store.append_episodes(episodes)
    return path


@pytest.fixture
def outcomes_store(tmp_path: Path) -> Path:
    return write(
        tmp_path / "outcomes.zarr",
        [
            (episode(4), {"success": True, "fps": 10.0}),  # frames 0-3, 0.1 s apart
            (episode(3, [5.0, 5.5, 6.5]), {"success": False}),  # frames 4-6
            (episode(2, [1.0, 1.25]), {"success": True}),  # frames 7-8, uneven clock
        ],
    )


def test_targets_of_successful_and_failed_episodes(outcomes_store: Path) -> None:
    ds = FrameDataset(outcomes_store, action_horizon=2, outcome_targets=True)
    b = {k: v.numpy() for k, v in ds.batch(np.arange(len(ds))).items()}
    np.testing.assert_array_equal(b["target/success"], [1, 1, 1, 1, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(b["target/has_progress"], [1, 1, 1, 1, 0, 0, 0, 1, 1])
    np.testing.assert_allclose(
        b["target/progress"], [0.25, 0.5, 0.75, 1.0, 0, 0, 0, 0.5, 1.0], rtol=1e-6
    )
    np.testing.assert_allclose(
        b["target/time_to_go"], [0.3, 0.2, 0.1, 0.0, 0, 0, 0, 0.25, 0.0], atol=1e-6
    )
    for name in ("target/success", "target/progress", "target/time_to_go"):
        assert b[name].dtype == np.float32
    # Single items and shuffled batches carry the same frame's targets.
    item = ds[2]
    assert float(item["target/progress"]) == pytest.approx(0.75)
    shuffled = ds.batch(np.array([8, 0, 5]))
    np.testing.assert_allclose(shuffled["target/time_to_go"].numpy(), [0.0, 0.3, 0.0], atol=1e-6)
    ds.close()
    plain = FrameDataset(outcomes_store, action_horizon=2)
    assert not any(k.startswith("target/") for k in plain.batch(np.arange(3)))
    plain.close()


def test_a_store_without_outcomes_is_refused_by_name(tmp_path: Path) -> None:
    path = write(
        tmp_path / "unlabelled.zarr",
        [(episode(3), {"success": True, "fps": 10.0}), (episode(2), {"fps": 10.0})],
    )
    with pytest.raises(SchemaMismatchError, match=r"1 of 2 episodes have none.*episodes \[1\]"):
        FrameDataset(path, outcome_targets=True)
    FrameDataset(path).close()  # without targets the store is fine
