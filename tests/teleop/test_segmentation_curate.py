"""`curate`: which frames of a labelled store go into the next round's store, with what
weight, cut into which episodes (a real store written with the project's store writer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from unilab.config.errors import ConfigError
from unilab.data import EpisodeMeta, EpisodeStore, StoreSchema
from unilab.data.errors import EpisodeStoreError
from unilab.data.sampler import WeightedFrameSampler
from unilab.teleop.segmentation import CurateConfig, curate

P, IDLE, F, R = "progress", "idle", "failure", "recovery"
LABELS = [
    [P, P, P, IDLE, IDLE, P, P, F, F, R, R, R],  # ends terminated, a success
    [P, P, IDLE, IDLE, IDLE, IDLE],  # ends truncated, a failure
]


def _frames(labels: list[str], k: int, terminated: bool) -> dict[str, np.ndarray]:
    n = len(labels)
    end = np.arange(n) == n - 1
    return {
        # obs encode (episode, frame) so every curated frame can be traced to its source.
        "obs/policy": np.stack([np.full(n, k), np.arange(n)], axis=1).astype(np.float32),
        "action": np.arange(n, dtype=np.float32)[:, None],
        "reward": np.ones(n, dtype=np.float32),
        "terminated": end & terminated,
        "truncated": end & (not terminated),
        "origin": np.where(np.array(labels) == R, "human", "sim"),
        "is_intervention": np.array(labels) == R,
        "segment": np.array(labels),
    }


@pytest.fixture
def labelled(tmp_path: Path) -> Path:
    path = tmp_path / "labelled.zarr"
    with EpisodeStore.create(path, StoreSchema.build(obs={"policy": 2}, action=1)) as st:
        for k, labels in enumerate(LABELS):
            meta = EpisodeMeta(task="t", success=k == 0, fps=20.0, tags={"kind": f"ep{k}"})
            st.append_episodes([(_frames(labels, k, terminated=k == 0), meta)])
    return path


def _episodes(path: Path) -> list[tuple[dict[str, np.ndarray], EpisodeMeta]]:
    with EpisodeStore.open(path, "r") as st:
        return [(st.episode(e), st.meta(e)) for e in range(len(st))]


def _sources(eps: list[tuple[dict[str, np.ndarray], EpisodeMeta]]) -> list[list[tuple[int, int]]]:
    return [[(int(k), int(j)) for k, j in f["obs/policy"]] for f, _ in eps]


def test_default_keeps_progress_and_recovery_and_cuts_at_dropped_frames(
    labelled: Path, tmp_path: Path
) -> None:
    result = curate(labelled, tmp_path / "out.zarr", CurateConfig())
    eps = _episodes(tmp_path / "out.zarr")
    assert _sources(eps) == [
        [(0, 0), (0, 1), (0, 2)],
        [(0, 5), (0, 6)],
        [(0, 9), (0, 10), (0, 11)],
        [(1, 0), (1, 1)],
    ]
    assert [m.tags["curated_from"] for _, m in eps] == [
        {"episode": 0, "frame": 0},
        {"episode": 0, "frame": 5},
        {"episode": 0, "frame": 9},
        {"episode": 1, "frame": 0},
    ]
    assert all(m.tags["kind"] == f"ep{m.tags['curated_from']['episode']}" for _, m in eps)
    # Pieces cut out before their source's end end truncated and claim no success; the
    # last piece of episode 0 keeps its terminal flag and success.
    assert [(bool(f["truncated"][-1]), bool(f["terminated"][-1])) for f, _ in eps] == [
        (True, False),
        (True, False),
        (False, True),
        (True, False),
    ]
    assert [m.success for _, m in eps] == [None, None, True, None]
    assert all(np.all(f["weight"] == 1.0) for f, _ in eps)
    np.testing.assert_array_equal(eps[2][0]["is_intervention"], [True] * 3)
    assert result.kept_by_label == {"none": 0, P: 7, IDLE: 0, F: 0, R: 3}
    assert result.dropped_by_label == {"none": 0, P: 0, IDLE: 6, F: 2, R: 0}
    assert (result.source_episodes, result.source_frames) == (2, 18)
    assert (result.episodes, result.frames) == (4, 10)


def test_idle_down_weighted_instead_of_dropped(labelled: Path, tmp_path: Path) -> None:
    curate(labelled, tmp_path / "out.zarr", CurateConfig(idle_weight=0.25))
    eps = _episodes(tmp_path / "out.zarr")
    assert _sources(eps)[0] == [(0, j) for j in range(7)]
    np.testing.assert_allclose(eps[0][0]["weight"], [1, 1, 1, 0.25, 0.25, 1, 1])
    np.testing.assert_allclose(eps[-1][0]["weight"], [1, 1, 0.25, 0.25, 0.25, 0.25])
    assert eps[-1][1].success is False  # the whole of episode 1: its own outcome
    # Curating a curated store multiplies its weights: idle frames now weigh 0.25 * 0.5.
    curate(tmp_path / "out.zarr", tmp_path / "again.zarr", CurateConfig(idle_weight=0.5))
    again = _episodes(tmp_path / "again.zarr")
    np.testing.assert_allclose(again[0][0]["weight"], [1, 1, 1, 0.125, 0.125, 1, 1])


def test_failures_kept_as_negatives_and_sampler_skips_them(labelled: Path, tmp_path: Path) -> None:
    curate(labelled, tmp_path / "out.zarr", CurateConfig(keep_failures=True))
    eps = _episodes(tmp_path / "out.zarr")
    # Failure frames stay (label `failure`, weight 0), so 5..11 is one piece.
    assert _sources(eps)[1] == [(0, j) for j in range(5, 12)]
    np.testing.assert_array_equal(eps[1][0]["segment"], [1, 1, 3, 3, 4, 4, 4])
    np.testing.assert_allclose(eps[1][0]["weight"], [1, 1, 0, 0, 1, 1, 1])
    from unilab.data.dataset import FrameDataset

    data = FrameDataset(tmp_path / "out.zarr", fields=["segment"])
    drawn = WeightedFrameSampler(data, 2000, seed=0).draw(2000)
    assert not (data.batch(drawn)["segment"] == 3).any()
    data.close()
    curate(labelled, tmp_path / "neg.zarr", CurateConfig(keep_failures=True, failure_weight=0.5))
    np.testing.assert_allclose(_episodes(tmp_path / "neg.zarr")[1][0]["weight"][2:4], 0.5)


def test_min_run_drops_short_pieces(labelled: Path, tmp_path: Path) -> None:
    result = curate(labelled, tmp_path / "out.zarr", CurateConfig(min_run=3))
    assert _sources(_episodes(tmp_path / "out.zarr")) == [
        [(0, 0), (0, 1), (0, 2)],
        [(0, 9), (0, 10), (0, 11)],
    ]
    assert result.dropped_by_label[P] == 4


def test_curate_errors_are_clear(labelled: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is the source store"):
        curate(labelled, labelled, CurateConfig())
    with pytest.raises(ConfigError, match=r"idle_weight=-1\.0 must be >= 0"):
        curate(labelled, tmp_path / "x.zarr", CurateConfig(idle_weight=-1.0))
    curate(labelled, tmp_path / "out.zarr", CurateConfig())
    with pytest.raises(EpisodeStoreError, match=r"already an episode store.*overwrite=True"):
        curate(labelled, tmp_path / "out.zarr", CurateConfig())
    curate(labelled, tmp_path / "out.zarr", CurateConfig(), overwrite=True)
    fresh = tmp_path / "fresh.zarr"
    with EpisodeStore.create(fresh, StoreSchema.build(obs={"policy": 2}, action=1)) as st:
        frames = _frames([P, P], 0, True)
        del frames["segment"]  # `segment` defaults to none
        st.append_episodes([(frames, {"task": "t", "fps": 20.0})])
    with pytest.raises(ValueError, match=r"every frame's segment is 'none'.*unilab data segment"):
        curate(fresh, tmp_path / "y.zarr", CurateConfig())
