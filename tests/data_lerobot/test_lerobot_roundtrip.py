"""Episode store -> LeRobotDataset v3 -> episode store, checked with LeRobot's own loader."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot_helpers import FPS, make_store, psnr

from unilab.data import EpisodeStore
from unilab.data.lerobot_io import export_to_lerobot, import_from_lerobot

pytestmark = pytest.mark.lerobot

# AV1 at LeRobot's settings (crf 30, yuv420p) on smooth 64x48 frames: measured 38 dB and a
# mean absolute error of 2.5 grey levels (max 32 at sharp chroma edges).
MIN_PSNR_DB = 32.0
MAX_MEAN_ABS = 4.0


def _check_image(got: np.ndarray, want: np.ndarray, exact: bool) -> None:
    assert got.shape == want.shape and got.dtype == np.uint8
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        assert psnr(got, want) >= MIN_PSNR_DB
        assert np.abs(got.astype(int) - want.astype(int)).mean() <= MAX_MEAN_ABS


@pytest.mark.parametrize("images", ["video", "image"])
def test_store_to_lerobot_loads_in_lerobot_with_same_values(
    tmp_path: Path, images: Literal["video", "image"]
) -> None:
    made = make_store(tmp_path / "src.zarr", episodes=3)
    report = export_to_lerobot(tmp_path / "src.zarr", tmp_path / "lr", "unilab/test", images=images)
    assert report.path == tmp_path / "lr" / "unilab" / "test"
    assert not [p for p in report.path.parent.iterdir() if p.name.startswith(".")]  # no temp dir

    ds = LeRobotDataset("unilab/test", root=report.path)
    assert ds.num_episodes == 3 and ds.fps == FPS and ds.meta.robot_type == "so100"
    assert ds.num_frames == sum(len(f["reward"]) for f, _ in made) == report.frames
    assert ds.meta.features["observation.images.front"]["dtype"] == images
    i = 0
    for k, (frames, meta) in enumerate(made):
        n = len(frames["reward"])
        for t in range(n):
            item = ds[i]
            assert int(item["episode_index"]) == k
            assert int(item["frame_index"]) == t
            assert item["task"] == meta.language_instruction
            np.testing.assert_array_equal(
                item["observation.state"].numpy(), frames["obs/policy"][t]
            )
            np.testing.assert_allclose(
                item["observation.critic"].numpy(), frames["obs/critic"][t], rtol=1e-6
            )
            np.testing.assert_array_equal(item["action"].numpy(), frames["action"][t])
            assert float(item["next.reward"]) == float(frames["reward"][t])
            done = frames["terminated"][t] | frames["truncated"][t]
            assert bool(item["next.done"]) == bool(done)
            assert int(item["unilab.policy_version"]) == frames["policy_version"][t]
            assert int(item["unilab.origin"]) == frames["origin"][t]
            image = item["observation.images.front"]  # (3, H, W) float in [0, 1]
            assert tuple(image.shape) == (3, *frames["images/front"].shape[1:3])
            pixels = np.rint(image.numpy().transpose(1, 2, 0) * 255).astype(np.uint8)
            _check_image(pixels, frames["images/front"][t], exact=images == "image")
            i += 1


@pytest.mark.parametrize("images", ["video", "image"])
def test_round_trip_store_lerobot_store_preserves_values(
    tmp_path: Path, images: Literal["video", "image"]
) -> None:
    make_store(tmp_path / "src.zarr", episodes=3)
    out = export_to_lerobot(tmp_path / "src.zarr", tmp_path / "lr", "unilab/rt", images=images)
    back = import_from_lerobot(out.path, tmp_path / "back.zarr")
    assert back.restored_metadata and back.episode_ids == [0, 1, 2]
    with EpisodeStore.open(tmp_path / "src.zarr") as src, EpisodeStore.open(back.store_path) as dst:
        assert dst.schema == src.schema
        assert dst.all_meta() == src.all_meta()
        np.testing.assert_array_equal(dst.lengths, src.lengths)
        for e in range(len(src)):
            a, b = src.episode(e), dst.episode(e)
            for name in src.schema.fields:
                assert b[name].dtype == a[name].dtype, name
                if name == "images/front":
                    for t in range(len(a[name])):
                        _check_image(b[name][t], a[name][t], exact=images == "image")
                else:  # float64 obs and timestamps exact too: read back from parquet as stored
                    np.testing.assert_array_equal(b[name], a[name], err_msg=name)


def test_export_refuses_to_clobber_and_needs_one_fps(tmp_path: Path) -> None:
    make_store(tmp_path / "src.zarr", episodes=1)
    export_to_lerobot(tmp_path / "src.zarr", tmp_path / "lr", "u/a", images="image")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_to_lerobot(tmp_path / "src.zarr", tmp_path / "lr", "u/a", images="image")
    again = export_to_lerobot(
        tmp_path / "src.zarr", tmp_path / "lr", "u/a", images="image", overwrite=True
    )
    assert LeRobotDataset("u/a", root=again.path).num_episodes == 1
    with pytest.raises(ValueError, match="positive integer"):
        export_to_lerobot(tmp_path / "src.zarr", tmp_path / "lr", "u/b", fps=12.5)
    assert not (tmp_path / "lr" / "u" / "b").exists()
