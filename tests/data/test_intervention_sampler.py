"""DAgger routing: the intervention sampler selects or up-weights human frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from unilab.data import EpisodeStore, StoreSchema
from unilab.data.dataset import FrameDataset
from unilab.data.intervention_sampler import InterventionSampler, intervention_mask


def _store(path: Path, labels: list[np.ndarray]) -> Path:
    schema = StoreSchema.build(obs={"policy": 3}, action=2)
    with EpisodeStore.create(path, schema) as store:
        for lab in labels:
            n = len(lab)
            store.append_episode(
                {
                    "obs/policy": np.zeros((n, 3), np.float32),
                    "action": np.zeros((n, 2), np.float32),
                    "reward": np.zeros(n, np.float32),
                    "terminated": np.arange(n) == n - 1,
                    "truncated": np.zeros(n, bool),
                    "origin": "real",
                    "is_intervention": lab,
                },
                {"fps": 50},
            )
    return path


def test_select_and_upweight(tmp_path: Path) -> None:
    a = np.zeros(100, bool)
    a[40:50] = True
    b = np.zeros(100, bool)
    b[0:5] = (
        True  # a takeover at the start of episode 2: lead frames must not reach back into episode 1
    )
    ds = FrameDataset(_store(tmp_path / "s.zarr", [a, b]))
    human = set(np.flatnonzero(np.concatenate([a, b])).tolist())

    select = InterventionSampler(ds, 5000, mode="select", seed=0)
    assert set(select) <= human and len(set(select)) == len(human)

    up = InterventionSampler(ds, 20000, mode="upweight", weight=5.0, seed=0)
    share = np.isin(np.fromiter(up, int), list(human)).mean()
    expected = 15 * 5 / (15 * 5 + 185)
    assert up.intervention_share == pytest.approx(expected)
    assert share == pytest.approx(expected, abs=0.02)

    with EpisodeStore.open(tmp_path / "s.zarr") as store:
        widened = intervention_mask(store, lead_frames=10)
    assert widened[30:50].all() and not widened[29] and not widened[90:100].any()
    assert widened[100:105].all()

    ds.close()
    none = FrameDataset(_store(tmp_path / "n.zarr", [np.zeros(10, bool)]))
    with pytest.raises(ValueError, match="no intervention frames"):
        InterventionSampler(none, 10, mode="select")
    none.close()
