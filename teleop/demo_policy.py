"""A small random MLP policy written straight to ONNX (no torch), with unilab metadata, for
exercising the HIL link against a task when no trained run is at hand (tests, benches,
demos). It is a real ONNX model run by onnxruntime through `OnnxPolicy`, not a stub; it
is just not trained.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from unilab.export.metadata import INPUT_NAME, OUTPUT_NAME, PolicyMetadata


def write_demo_policy(
    task: str, path: str | Path, *, seed: int = 0, hidden: int = 32, gain: float = 0.3
) -> Path:
    from unilab.deploy.sim_task import make_task_from_dicts

    t = make_task_from_dicts({"name": task}, {}, 1, seed)
    spec = t.robot
    obs_dim, act_dim = int(t.obs_dims["policy"]), int(t.action_dim)
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((obs_dim, hidden)) / np.sqrt(obs_dim)).astype(np.float32)
    b1 = np.zeros(hidden, np.float32)
    w2 = (rng.standard_normal((hidden, act_dim)) * gain / np.sqrt(hidden)).astype(np.float32)
    b2 = np.zeros(act_dim, np.float32)
    nodes = [
        helper.make_node("MatMul", [INPUT_NAME, "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Tanh", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["a0"]),
        helper.make_node("Add", ["a0", "b2"], [OUTPUT_NAME]),
    ]
    graph = helper.make_graph(
        nodes,
        "demo_policy",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", obs_dim])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", act_dim])],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    meta = PolicyMetadata(
        task=task,
        robot=spec.name,
        algorithm="demo_random_mlp",
        joint_names=list(spec.joint_names),
        default_pose=list(spec.default_pose),
        kp=list(spec.kp),
        kd=list(spec.kd),
        action_scale=float(spec.action_scale),
        action_clip=float(t.action_clip),
        control_mode=spec.control_mode,
        control_dt=float(t.control_dt),
        joint_lower=list(spec.joint_lower),
        joint_upper=list(spec.joint_upper),
        obs_dims={k: int(v) for k, v in t.obs_dims.items()},
        action_dim=act_dim,
        task_config={"name": task},
    )
    helper.set_model_props(model, meta.to_props())
    onnx.checker.check_model(model)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    return out
