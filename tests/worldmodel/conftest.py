"""Shared by the world-model tests: one torch thread (the sim and the models run in this
process), and the tiny model settings the generator and filter tests train in seconds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

COMMON = ["runtime.learner_threads=1", "run.quiet=true", "logging.tensorboard=false"]
COMMON += ["eval.every=0", "viz.rerun=false", "run.export=false", "run.play_episodes=0"]
SMALL_WM = ["algo.batch_size=16", "algo.channels=[8,16]", "algo.latent_dim=16"]
SMALL_WM += ["algo.dynamics_width=32", "algo.dynamics_layers=1", "algo.horizon=1"]
SMALL_WM += ["algo.warmup_steps=2", "algo.val_every=20", "algo.steps=20"]
TINY_VLA = ["algo=bc_flow", "algo.steps=4", "algo.val_every=4", "algo.batch_size=8"]
TINY_VLA += ["algo.warmup_steps=2", "algo.model.width=32", "algo.model.heads=2"]
TINY_VLA += ["algo.model.image_channels=[8,16]", "algo.model.image_tokens_side=2"]
TINY_VLA += ["algo.model.horizon=4", "algo.model.n_act=2", "algo.model.num_steps=2"]
TINY_VLA += ["algo.model.prefix_layers=1", "algo.model.expert_layers=1"]


@pytest.fixture(autouse=True)
def _every_test_on_one_torch_thread(torch_one_thread: None) -> None:
    """(A conftest's `pytestmark` applies to nothing, so the shared fixture is pulled in here.)"""


@pytest.fixture(scope="session")
def tiny() -> SimpleNamespace:
    """`common` run settings (quiet, no eval/export/play), a one-step `wm` of 20 steps, a
    4-step bc_flow `vla`."""
    return SimpleNamespace(common=COMMON, wm=SMALL_WM, vla=TINY_VLA)
