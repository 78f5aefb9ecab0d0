"""A dataset made with LeRobot's own API (no unilab sidecar) imports into the store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot_helpers import H, W, camera_frames, psnr

from unilab.data import EpisodeStore
from unilab.data.lerobot_io import import_from_lerobot

pytestmark = pytest.mark.lerobot

FPS = 30
LENGTHS = (9, 23, 15)
TASKS = ("fold the towel", "fold the towel", "open the drawer")


def _make_lerobot_dataset(root: Path) -> list[dict[str, np.ndarray]]:
    """Three episodes recorded the way a LeRobot user would: random state/action, a tiny
    synthetic camera stream as video, rewards, done and success flags."""
    features = {
        "observation.state": {
            "dtype": "float32",
            "shape": (6,),
            "names": [f"j{i}" for i in range(6)],
        },
        "observation.images.top": {
            "dtype": "video",
            "shape": (H, W, 3),
            "names": ["height", "width", "channels"],
        },
        "action": {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
        "next.success": {"dtype": "bool", "shape": (1,), "names": None},
    }
    ds = LeRobotDataset.create(
        "someone/towels", fps=FPS, features=features, root=root, robot_type="koch"
    )
    rng = np.random.default_rng(7)
    episodes = []
    for k, n in enumerate(LENGTHS):
        ep = {
            "state": rng.standard_normal((n, 6)).astype(np.float32),
            "action": rng.standard_normal((n, 6)).astype(np.float32),
            "reward": rng.uniform(0, 1, n).astype(np.float32),
            "image": camera_frames(n, phase=5 + 11 * k),
            "done": np.arange(n) == n - 1,
            "success": (np.arange(n) == n - 1) & (k != 1),
        }
        for t in range(n):
            ds.add_frame(
                {
                    "observation.state": ep["state"][t],
                    "observation.images.top": ep["image"][t],
                    "action": ep["action"][t],
                    "next.reward": ep["reward"][t : t + 1],
                    "next.done": ep["done"][t : t + 1],
                    "next.success": ep["success"][t : t + 1],
                    "task": TASKS[k],
                }
            )
        ds.save_episode()
        episodes.append(ep)
    ds.finalize()
    return episodes


def test_lerobot_made_dataset_imports_with_values(tmp_path: Path) -> None:
    root = tmp_path / "towels"
    episodes = _make_lerobot_dataset(root)
    report = import_from_lerobot(
        root, tmp_path / "store.zarr", repo_id="someone/towels", origin="real"
    )
    assert not report.restored_metadata
    assert report.episode_ids == [0, 1, 2] and report.frames == sum(LENGTHS)
    assert report.fields["observation.images.top"] == "images/top"
    lerobot_view = LeRobotDataset("someone/towels", root=root)
    with EpisodeStore.open(tmp_path / "store.zarr") as store:
        assert set(store.schema.user_fields) == {"obs/policy", "images/top", "action"}
        assert store.schema.fields["images/top"].shape == (H, W, 3)
        np.testing.assert_array_equal(store.lengths, LENGTHS)
        index = 0
        for k, ep in enumerate(episodes):
            got = store.episode(k)
            meta = store.meta(k)
            n = LENGTHS[k]
            np.testing.assert_array_equal(got["obs/policy"], ep["state"])
            np.testing.assert_array_equal(got["action"], ep["action"])
            np.testing.assert_array_equal(got["reward"], ep["reward"])
            # next.done at the last frame is a terminal state; nothing else ends an episode
            np.testing.assert_array_equal(got["terminated"], ep["done"])
            assert not got["truncated"].any()
            np.testing.assert_allclose(got["timestamp"], np.arange(n) / FPS, atol=1e-6)
            assert (got["origin"] == 1).all()  # real
            assert (got["policy_version"] == -1).all()
            assert meta.language_instruction == TASKS[k]
            assert meta.robot == "koch" and meta.fps == FPS
            assert meta.success == (k != 1)
            assert meta.tags["lerobot"] == {"repo_id": "someone/towels", "episode_index": k}
            # camera: close to what was recorded, and what LeRobot's own loader decodes
            assert psnr(got["images/top"], ep["image"]) >= 32.0
            for t in range(n):
                item = lerobot_view[index + t]["observation.images.top"].numpy()
                theirs = np.rint(item.transpose(1, 2, 0) * 255).astype(np.uint8)
                diff = np.abs(theirs.astype(int) - got["images/top"][t].astype(int))
                assert diff.max() <= 1, (k, t, diff.max())
            index += n


def test_import_appends_to_matching_store_and_rejects_other_schema(tmp_path: Path) -> None:
    root = tmp_path / "towels"
    _make_lerobot_dataset(root)
    first = import_from_lerobot(root, tmp_path / "store.zarr", origin="human", episodes=[2])
    second = import_from_lerobot(root, tmp_path / "store.zarr", origin="human", episodes=[0, 1])
    assert first.episode_ids == [0] and second.episode_ids == [1, 2]
    with EpisodeStore.open(tmp_path / "store.zarr") as store:
        np.testing.assert_array_equal(store.lengths, [LENGTHS[2], LENGTHS[0], LENGTHS[1]])
        assert (store.read("origin") == 2).all()  # human
    with pytest.raises(ValueError, match="origin"):
        import_from_lerobot(root, tmp_path / "other.zarr", origin="robot")
    with pytest.raises(FileNotFoundError, match=r"meta/info\.json"):
        import_from_lerobot(tmp_path, tmp_path / "other.zarr")
