"""`--flow-steps K` (eval, play): a flow VLA loaded from its run integrates its chunks in K
Euler steps instead of the K it was trained with; the report says which; anything else (an
ONNX export, a policy without a flow) is refused with a message saying what applies."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from vla_run_helpers import vla_run

from unilab.cli import main
from unilab.deploy.policy_source import PolicyLoadError, load_policy, set_flow_steps


@pytest.fixture(scope="module")
def flow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vla_run(tmp_path_factory.mktemp("flow_steps"))  # trained with K = 2


def _chunk(run: Path, steps: int | None) -> np.ndarray:
    loaded = load_policy(run)
    if steps is not None:
        set_flow_steps(loaded, steps)
    rng = np.random.default_rng(0)
    obs = {
        group: rng.normal(size=(1, *shape)).astype(np.float32)
        if group != "instruction"
        else np.zeros((1, *shape), np.int64)
        for group, shape in loaded.policy.policy.obs_shapes.items()  # type: ignore[attr-defined]
    }
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
