"""The rollout segmentation critic (issue 19 part B): a pairwise progress model trained on
the store's own episodes, a segmenter that cuts episodes into progress / idle / failure /
recovery spans and writes them into the store's `segment` column, and `curate`, which
builds the next round's training store from the labels.

    from unilab.teleop.segmentation import SegmentConfig, train_progress_model, label_store
    model = train_progress_model("runs/round1.zarr", SegmentConfig().model)
    label_store("runs/round1.zarr", model, SegmentConfig())
    curate("runs/round1.zarr", "runs/round2.zarr", CurateConfig(idle_weight=0.0))

See docs/segmentation.md and docs/decisions/0092-segmentation-critic.md.
"""

from __future__ import annotations

from unilab.teleop.segmentation.config import CurateConfig, ProgressModelConfig, SegmentConfig
from unilab.teleop.segmentation.curate import CurateResult, curate
from unilab.teleop.segmentation.progress_model import (
    ProgressModel,
    load_progress_model,
    save_progress_model,
    train_progress_model,
)
from unilab.teleop.segmentation.segmenter import LabelResult, label_store, segment_episode

__all__ = [
    "CurateConfig",
    "CurateResult",
    "LabelResult",
    "ProgressModel",
    "ProgressModelConfig",
    "SegmentConfig",
    "curate",
    "label_store",
    "load_progress_model",
    "save_progress_model",
    "segment_episode",
    "train_progress_model",
]
