"""The torch-free VLA runner: it imports no torch, plans the same chunks as the torch
policy for the same noise, and its chunk executor reproduces the torch policy's executor
step for step from the same seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy
from unilab.export.metadata import MetadataError
from unilab.export.vla_onnx import export_vla_onnx
from unilab.policies.vla.chunking import ChunkExecutor
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.policy import VLAPolicy

INPUTS = VLAInputs(
    proprio_dim=4, action_dim=2, cameras={"front": (16, 16)}, vocab_size=6, pad_id=0,
    instruction_len=3,
)  # fmt: skip


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[VLAPolicy, Path]:
    torch.manual_seed(0)
    cfg = VLAConfig(
        horizon=5, num_steps=3, n_act=2, width=32, heads=2, prefix_layers=1, expert_layers=1,
        image_channels=[8], image_tokens_side=2, n_tokens=2,
    )  # fmt: skip
    policy = VLAPolicy(INPUTS, cfg)
    with torch.no_grad():
        for p in policy.parameters():
            if p.abs().sum() == 0:
                p.normal_(0.0, 0.3)
    policy.eval()
    path = export_vla_onnx(
        policy, tmp_path_factory.mktemp("vla") / "vla.onnx", vocabulary=list("abcdef")
    )
    return policy, path


def numpy_obs(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "policy": rng.standard_normal((n, 4)).astype(np.float32),
        "images/front": rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8),
        "instruction": np.array([[1, 2, 0]] * n, np.int64),
    }


def test_runner_imports_no_torch(exported: tuple[VLAPolicy, Path]) -> None:
    _, path = exported
    code = (
        "import sys, json, numpy as np\n"
        "from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy\n"
        f"p = OnnxVLAPolicy({str(path)!r})\n"
        "ex = p.executor(num_envs=2, seed=3)\n"
        "obs = {'policy': np.zeros((2, 4), np.float32),\n"
        "       'images/front': np.zeros((2, 16, 16, 3), np.uint8),\n"
        "       'instruction': np.array([[1, 2, 0]] * 2)}\n"
        "a = ex(obs)\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'shape': list(a.shape),\n"
        "                  'vocab': p.metadata.vocabulary}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc == {"torch": False, "shape": [2, 2], "vocab": list("abcdef")}


def test_runner_and_torch_execute_the_same_chunks(exported: tuple[VLAPolicy, Path]) -> None:
    policy, path = exported
    runner = OnnxVLAPolicy(path)
    assert (runner.horizon, runner.action_dim, runner.metadata.n_act) == (5, 2, 2)
    obs = numpy_obs(6, 0)
    noise = np.random.default_rng(1).standard_normal((6, 5, 2)).astype(np.float32)
    tokens = np.array([0, 1, -1, 0, 1, -1])
    np.testing.assert_allclose(
        runner.plan({**obs, "token": tokens}, noise),
        policy.planner()({**obs, "token": tokens}, noise),
        atol=1e-4,
        rtol=0,
    )
    # Executors over both planners, same seed, same observations, resets in between.
    onnx_ex = runner.executor(num_envs=3, seed=11)
    torch_ex = ChunkExecutor(policy.planner(), 3, 5, 2, n_act=2, seed=11)
    for step in range(7):
        o = numpy_obs(3, 100 + step)
        np.testing.assert_allclose(onnx_ex(o), torch_ex(o), atol=1e-4, rtol=0)
        if step == 3:
            onnx_ex.reset([0])
            torch_ex.reset([0])
        np.testing.assert_array_equal(onnx_ex.replanned, torch_ex.replanned)


def test_runner_rejects_bad_input(exported: tuple[VLAPolicy, Path], tmp_path: Path) -> None:
    _, path = exported
    runner = OnnxVLAPolicy(path)
    obs = numpy_obs(2, 0)
    with pytest.raises(ValueError, match="missing \\['instruction'\\]"):
        runner.plan({k: v for k, v in obs.items() if k != "instruction"})
    with pytest.raises(ValueError, match="must be uint8"):
        runner.plan({**obs, "images/front": obs["images/front"].astype(np.float32)})
    with pytest.raises(ValueError, match="instruction ids must be in \\[0, 6\\)"):
        runner.plan({**obs, "instruction": np.full((2, 3), 6)})
    with pytest.raises(ValueError, match="noise has shape"):
        runner.plan(obs, np.zeros((2, 4, 2), np.float32))
    with pytest.raises(MetadataError, match="not found"):
        OnnxVLAPolicy(tmp_path / "none.onnx")
