"""ONNX and TorchScript export of PPO, SAC and TD3 actors: onnxruntime agrees with torch,
the normalizer travels inside the graph, and the metadata is complete and correct."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from unilab.algos.registry import ALGORITHMS
from unilab.config import compose
from unilab.config.schema import Config
from unilab.deploy.onnx_policy import OnnxPolicy
from unilab.export.metadata import FORMAT_VERSION, PolicyMetadata
from unilab.export.onnx_export import export_onnx, onnx_max_abs_diff
from unilab.export.run_policy import make_probe_task, policy_metadata
from unilab.export.torchscript_export import export_torchscript, load_torchscript
from unilab.policies.normalizer import RunningNormalizer
from unilab.tasks.registry import make_task

ALGOS = ["ppo", "sac", "td3"]


def _recorded_observations(cfg: Config, n: int = 1000) -> np.ndarray:
    """Real cart-pole observations under random actions (pole falls, resets, wide states)."""
    task = make_task(cfg.task, num_envs=20, seed=1)
    rng = np.random.default_rng(0)
    obs = task.reset()["policy"]
    rows = []
    while len(rows) * 20 < n:
        rows.append(obs)
        obs = task.step(rng.uniform(-1, 1, (20, 1)).astype(np.float32)).obs["policy"]
    return np.concatenate(rows)[:n].astype(np.float32)


def _actor(algo: str, cfg: Config, data: np.ndarray) -> nn.Module:
    """An untrained actor with outputs of order one whose normalizer has seen shifted,
    scaled data (so a graph without the normalizer would disagree)."""
    torch.manual_seed(0)
    actor = ALGORITHMS.get(algo).algo_cls.build_actor(cfg.algo, {"policy": data.shape[1]}, 1)
    shifted = torch.from_numpy(data) * torch.tensor([3.0, 0.5, 2.0, 4.0, 7.0]) + 1.5
    actor.normalizer.update(shifted)
    # PPO starts its output layer near zero; weights of unit scale make every output count.
    with torch.no_grad():
        for layer in actor.net:
            if isinstance(layer, nn.Linear):
                layer.weight.normal_(0.0, layer.in_features**-0.5)
                layer.bias.normal_(0.0, 0.1)
    return actor.eval()


@dataclass
class Exported:
    actor: nn.Module
    meta: PolicyMetadata
    onnx: Path


@dataclass
class Setup:
    out: Path
    recorded: np.ndarray
    exported: dict[str, Exported]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("export")
    base = compose(["task=cartpole_balance"])
    recorded, task = _recorded_observations(base), make_probe_task(base)
    exported = {}
    for algo in ALGOS:
        cfg = compose(["task=cartpole_balance", f"algo={algo}"])
        actor = _actor(algo, cfg, recorded)
        meta = policy_metadata(task, cfg, {"file": "none", "iteration": 0})
        exported[algo] = Exported(actor, meta, export_onnx(actor, meta, out / f"{algo}.onnx"))
    return Setup(out, recorded, exported)


@pytest.mark.parametrize("algo", ALGOS)
def test_onnxruntime_agrees_with_torch(setup: Setup, algo: str) -> None:
    actor, path, recorded = setup.exported[algo].actor, setup.exported[algo].onnx, setup.recorded
    assert recorded.shape == (1000, 5)
    norm = actor.normalizer
    assert isinstance(norm, RunningNormalizer)
    rng = np.random.default_rng(1)
    # Random observations around the normalizer statistics, some beyond its clip range.
    spread = np.sqrt(norm.var.numpy()) * 6.0
    random = (norm.mean.numpy() + spread * rng.standard_normal((1000, 5))).astype(np.float32)
    for obs in (random, recorded):
        assert onnx_max_abs_diff(path, actor, obs) <= 1e-5
    # The normalizer is inside the graph: the same actor without it answers differently.
    plain = copy.deepcopy(actor)
    plain.normalizer = RunningNormalizer(5)
    assert onnx_max_abs_diff(path, plain, recorded) > 1e-2
    # Dynamic batch axis: 1 and 7 rows both run.
    policy = OnnxPolicy(path)
    single = policy(recorded[0])
    assert single.shape == (1,)
    np.testing.assert_allclose(single, policy(recorded[:7])[0], atol=1e-6)


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_torchscript_agrees_with_torch_and_carries_metadata(setup: Setup, algo: str) -> None:
    exp = setup.exported[algo]
    path = export_torchscript(exp.actor, exp.meta, setup.out / f"{algo}.pt")
    module, text = load_torchscript(path)
    obs = torch.from_numpy(setup.recorded)
    with torch.no_grad():
        assert float((module(obs) - exp.actor(obs)).abs().max()) <= 1e-6
    assert json.loads(text)["algorithm"] == algo


def test_onnx_graph_and_metadata(setup: Setup) -> None:
    meta, path = setup.exported["ppo"].meta, setup.exported["ppo"].onnx
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 17
    (inp,), (outp,) = model.graph.input, model.graph.output
    assert (inp.name, outp.name) == ("obs", "actions")
    in_dims = inp.type.tensor_type.shape.dim
    assert in_dims[0].dim_param and not in_dims[0].dim_value  # symbolic batch axis
    assert in_dims[1].dim_value == 5
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    props = {p.key: p.value for p in model.metadata_props}
    for key in (
        "task", "robot", "joint_names", "default_pose", "kp", "kd", "action_scale",
        "control_dt", "obs_dims", "unilab_version", "algorithm",
    ):  # fmt: skip
        assert key in props, key
        json.loads(props[key])  # every value is a JSON string
    assert json.loads(props["task"]) == "cartpole_balance"
    assert json.loads(props["robot"]) == "cartpole"
    assert json.loads(props["joint_names"]) == ["slider"]
    assert json.loads(props["control_dt"]) == pytest.approx(0.02)
    assert json.loads(props["obs_dims"]) == {"policy": 5}
    assert json.loads(props["algorithm"]) == "ppo"
    assert json.loads(props["format_version"]) == FORMAT_VERSION
    # onnxruntime reads the same record back.
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    read = PolicyMetadata.from_props(dict(session.get_modelmeta().custom_metadata_map))
    assert read == meta
    assert read.task_config["max_pole_angle"] == pytest.approx(0.6)


def test_quadruped_metadata_carries_gains_and_pose(tmp_path: Path) -> None:
    from unilab.robots import get_robot

    cfg = compose(["task=quadruped_joystick_flat", "algo=ppo", "algo.actor_hidden=[32]"])
    task = make_probe_task(cfg)
    actor = ALGORITHMS.get("ppo").algo_cls.build_actor(cfg.algo, task.obs_dims, task.action_dim)
    meta = policy_metadata(task, cfg, {})
    policy = OnnxPolicy(export_onnx(actor, meta, tmp_path / "q.onnx"))
    spec = get_robot("quadruped")
    m = policy.metadata
    assert m.joint_names == list(spec.joint_names) and len(m.joint_names) == 12
    assert m.kp == list(spec.kp) and m.kd == list(spec.kd)
    assert m.default_pose == pytest.approx(list(spec.default_pose))
    assert m.action_scale == spec.action_scale and m.control_mode == "position"
    assert m.obs_dim == task.obs_dims["policy"] and m.action_dim == 12
