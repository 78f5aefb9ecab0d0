"""A store that `unilab collect` wrote (two tasks, cameras) exports with its camera streams
as video and loads in LeRobot's own `LeRobotDataset` with the same frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot_helpers import psnr

from unilab.data import EpisodeStore, validate
from unilab.data.collect import collect
from unilab.data.lerobot_io import export_to_lerobot

pytestmark = pytest.mark.lerobot

TASKS = ("arm_pick_place", "arm_move_side")
# AV1 (LeRobot's libsvtav1 at crf 30, yuv420p) on 64 px renders of the tabletop scene,
# measured here: median 32 dB per frame on both cameras, the worst frames (fast wrist motion)
# 24-25 dB; the neighbouring frame scores ~26 dB median, so the median also shows alignment.
MIN_MEDIAN_PSNR_DB = 30.0
MIN_PSNR_DB = 21.0


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("collect") / "demos.zarr"
    for task in TASKS:
        result = collect(store, task, episodes=3, workers=1, envs_per_worker=3, quiet=True)
        assert result.kept == 3 and result.interrupted is False
    assert validate(store) == []
    return store


def test_collected_store_loads_in_lerobot_with_video_cameras(
    collected: Path, tmp_path: Path
) -> None:
    out = export_to_lerobot(collected, tmp_path / "lr", "unilab/collected", images="video")
    ds = LeRobotDataset("unilab/collected", root=out.path)
    with EpisodeStore.open(collected, "r") as store:
        metas = store.all_meta()
        assert ds.num_episodes == len(store) == 3 * len(TASKS)
        assert ds.num_frames == store.num_frames
        for cam in ("front", "wrist"):
            assert ds.meta.features[f"observation.images.{cam}"]["dtype"] == "video"
        assert ds.meta.features["observation.state"]["shape"] == (30,)
        index = 0
        scores: list[float] = []
        for k, meta in enumerate(metas):
            frames = store.episode(k)
            n = len(frames["reward"])
            for t in (0, n // 2, n - 1):
                item = ds[index + t]
                assert int(item["episode_index"]) == k and int(item["frame_index"]) == t
                assert item["task"] == meta.language_instruction
                np.testing.assert_array_equal(
                    item["observation.state"].numpy(), frames["obs/policy"][t]
                )
                np.testing.assert_array_equal(item["action"].numpy(), frames["action"][t])
                assert int(item["unilab.mode"]) == frames["mode"][t] == meta.tags["mode"]
                np.testing.assert_array_equal(
                    item["observation.instruction"].numpy(), frames["obs/instruction"][t]
                )
                for cam in ("front", "wrist"):
                    image = item[f"observation.images.{cam}"]  # (3, H, W) float in [0, 1]
                    pixels = np.rint(image.numpy().transpose(1, 2, 0) * 255).astype(np.uint8)
                    assert pixels.shape == frames[f"images/{cam}"][t].shape
                    scores.append(psnr(pixels, frames[f"images/{cam}"][t]))
            index += n
    assert min(scores) >= MIN_PSNR_DB and np.median(scores) >= MIN_MEDIAN_PSNR_DB, scores
