"""`--flow-steps K` (eval, play): a flow VLA loaded from its run integrates its chunks in K
Euler steps instead of the K it was trained with; the report says which; anything else (an
ONNX export, a policy without a flow) is refused with a message saying what applies. The
same K is a `tune-inference` setting (the planner's `flow_steps`), and a tuned K is
exported: the ONNX graph unrolls that many steps and its metadata says so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from vla_run_helpers import vla_run

from unilab.cli import main
from unilab.deploy.policy_source import PolicyLoadError, load_policy, set_flow_steps
from unilab.deploy.sim_task import configs_for_policy
from unilab.deploy.tune_inference import tune_inference, usable_space
from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy
from unilab.export.onnx_export import ExportError
from unilab.export.run_export import export_run
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.policy import VLAPolicy


@pytest.fixture(scope="module")
def flow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vla_run(tmp_path_factory.mktemp("flow_steps"))  # trained with K = 2


def _obs(vla: VLAPolicy, n: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        group: rng.normal(size=(n, *shape)).astype(np.float32)
        if group != "instruction"
        else np.zeros((n, *shape), np.int64)
        for group, shape in vla.obs_shapes.items()
    }


def _chunk(run: Path, steps: int | None) -> np.ndarray:
    loaded = load_policy(run)
    if steps is not None:
        set_flow_steps(loaded, steps)
    obs = _obs(loaded.policy.policy)  # type: ignore[attr-defined]
    return loaded.policy.act(obs, deterministic=True).actions


def test_flow_steps_change_the_integration_not_the_weights(flow_run: Path) -> None:
    trained = _chunk(flow_run, None)
    np.testing.assert_array_equal(_chunk(flow_run, 2), trained)  # the trained K: same chunk
    assert np.abs(_chunk(flow_run, 6) - trained).max() > 1e-4  # another K: another path


def test_eval_reports_the_flow_steps_it_used(flow_run: Path, tmp_path: Path) -> None:
    for flag, steps in (([], 2), (["--flow-steps", "5"], 5)):
        out = tmp_path / f"eval{steps}.json"
        argv = ["eval", str(flow_run), "--episodes", "2", "--out", str(out), *flag]
        assert main(argv) == 0
        assert json.loads(out.read_text())["execution"]["flow_steps"] == steps


def test_flow_steps_are_refused_where_they_cannot_apply(
    flow_run: Path, trained_onnx: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(flow_run), "--episodes", "2", "--flow-steps", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert main(["eval", str(trained_onnx), "--episodes", "2", "--flow-steps", "4"]) == 2
    assert "export again from the run" in capsys.readouterr().err
    with pytest.raises(PolicyLoadError, match="not a flow VLA"):
        set_flow_steps(load_policy(trained_onnx), 4)
    assert main(["play", "expert", "task=arm_move_side", "--flow-steps", "4"]) == 2
    assert "--flow-steps needs a flow policy" in capsys.readouterr().err


def test_the_planner_integrates_in_the_flow_steps_it_is_given(flow_run: Path) -> None:
    vla = load_policy(flow_run).policy.policy  # type: ignore[attr-defined]
    obs = _obs(vla, n=3)
    noise = np.random.default_rng(1).standard_normal((3, 8, vla.action_dim), dtype=np.float32)
    as_trained = vla.planner()(obs, noise)
    np.testing.assert_array_equal(vla.planner(flow_steps=2)(obs, noise), as_trained)
    five = vla.planner(flow_steps=5)(obs, noise)
    assert np.abs(five - as_trained).max() > 1e-4
    vla.num_steps = 5  # what `--flow-steps 5` does: the same chunk
    np.testing.assert_allclose(vla.planner()(obs, noise), five, atol=1e-6)
    with pytest.raises(ValueError, match="at least 1"):
        vla.planner(flow_steps=0)


def test_tuned_flow_steps_run_in_the_rounds_and_go_into_the_graph(
    flow_run: Path, tmp_path: Path
) -> None:
    loaded = load_policy(flow_run)
    task_cfg, sim_cfg = configs_for_policy(
        loaded.metadata.task_config, loaded.metadata.sim_config, []
    )
    report = tune_inference(
        loaded, task_cfg, sim_cfg, space={"flow_steps": [1, 3, 0]}, rounds=2,
        episodes_per_round=2, compare_seeds=1,
    )  # fmt: skip
    assert report["defaults"] == {"flow_steps": 2}  # the trained K
    assert report["space"] == {"flow_steps": [1, 3]}
    assert "[0] left out" in report["skipped"]["flow_steps"]
    assert {r["settings"]["flow_steps"] for r in report["rounds"]} <= {1, 3}
    # the export unrolls the chosen K; onnxruntime and torch at that K agree
    out = tmp_path / "export"
    written = export_run(flow_run, out, inference_settings={"flow_steps": 3})
    runner = OnnxVLAPolicy(written["onnx"])
    assert runner.metadata.num_steps == 3
    vla = load_policy(flow_run).policy.policy  # type: ignore[attr-defined]
    obs = _obs(vla, n=2)
    noise = np.random.default_rng(2).standard_normal((2, 8, vla.action_dim), dtype=np.float32)
    np.testing.assert_allclose(
        runner.plan(obs, noise), vla.planner(flow_steps=3)(obs, noise), atol=1e-4
    )
    # K is in the graph: not tunable on the ONNX file; no flow, no K; bad values refused
    _, skipped = usable_space(
        load_policy(written["onnx"]).policy, {"flow_steps": [2], "n_act": [2]}
    )
    assert "unrolled in the ONNX graph" in skipped["flow_steps"]
    mse = VLAPolicy(
        VLAInputs(proprio_dim=4, action_dim=2),
        VLAConfig(horizon=4, n_act=2, width=32, heads=2),
        head="mse",
    )
    assert (
        "no flow to integrate"
        in usable_space(mse, {"flow_steps": [2], "n_act": [2]})[1]["flow_steps"]
    )
    with pytest.raises(ExportError, match="flow_steps=0 must be an integer >= 1"):
        export_run(flow_run, out, inference_settings={"flow_steps": 0})
    assert OnnxVLAPolicy(written["onnx"]).metadata.num_steps == 3  # the good export kept
