"""Fixtures shared by the HIL tests: keys (an allowlist with alice and monitor, not the
intruder) and a demo ONNX policy for arm_reach."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hil_fixtures import Keys

from unilab.teleop.session_tools import make_keyset


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keyset(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="session")
def demo_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from unilab.teleop.demo_policy import write_demo_policy

    return write_demo_policy("arm_reach", tmp_path_factory.mktemp("policy") / "policy.onnx")


@pytest.fixture(scope="session")
def ground_truth_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 mixed-quality arm_pick_place episodes with known segments (`true_segment`),
    written by the segmentation ground-truth generator; copy it before changing it."""
    from unilab.teleop.segmentation.ground_truth import generate

    path = tmp_path_factory.mktemp("segmentation") / "train.zarr"
    generate(path, 24, seed=3, num_envs=8)
    return path


@pytest.fixture(scope="session")
def tiny_critic(ground_truth_store: Path) -> Any:
    """A small progress model trained on `ground_truth_store` (it never reads the truth)."""
    import torch

    from unilab.teleop.segmentation import ProgressModelConfig, train_progress_model

    torch.set_num_threads(1)
    cfg = ProgressModelConfig(steps=400, hidden=64, batch_size=256, seed=0)
    model, _ = train_progress_model(ground_truth_store, cfg)
    return model
