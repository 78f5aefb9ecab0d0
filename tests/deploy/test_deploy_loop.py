"""The torch-free deploy loop against a simulated robot: it reproduces play, reports jitter,
and stops holding the last safe action when the policy goes bad."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from unilab.deploy.loop import (
    BAD_ACTION,
    COMPLETED,
    EXIT_SAFETY_STOP,
    DeployReport,
    PolicyFn,
    run_deploy,
)
from unilab.deploy.onnx_policy import OnnxPolicy
from unilab.deploy.play import play
from unilab.deploy.policy_source import load_policy
from unilab.deploy.sim_robot import SimRobot
from unilab.deploy.sim_task import configs_for_policy
from unilab.robots.interface import Robot


def _robot(policy: OnnxPolicy, seed: int) -> SimRobot:
    robot = SimRobot.for_policy(policy.metadata, seed=seed)
    robot.reset()
    return robot


def _deploy(
    policy: OnnxPolicy, robot: SimRobot, steps: int, speed: float, fn: PolicyFn | None = None
) -> DeployReport:
    meta = policy.metadata
    return run_deploy(
        fn or policy,
        robot,
        obs_group=meta.obs_group,
        action_dim=meta.action_dim,
        action_clip=meta.action_clip,
        steps=steps,
        speed=speed,
    )


def _play_returns(target: Path, seed: int, episodes: int, tmp: Path) -> list[float]:
    policy = load_policy(target)
    meta = policy.metadata
    task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, [])
    result = play(
        policy,
        task_cfg,
        sim_cfg,
        tmp,
        "p",
        episodes=episodes,
        num_envs=1,
        seed=seed,
        video=False,
        rerun=False,
    )
    return [e["return"] for e in result.episodes]


def test_deploy_reproduces_play_for_the_same_seed(
    trained_run: Path, trained_onnx: Path, tmp_path: Path
) -> None:
    policy = OnnxPolicy(trained_onnx)
    robot = _robot(policy, seed=7)
    assert isinstance(robot, Robot)
    report = _deploy(policy, robot, 1000, speed=20.0)
    assert report.stop_reason == COMPLETED and report.steps == 1000
    deployed = robot.episode_returns
    assert len(deployed) >= 2  # two full 500-step episodes for a balancing policy
    from_onnx = _play_returns(trained_onnx, 7, len(deployed), tmp_path)
    from_torch = _play_returns(trained_run, 7, len(deployed), tmp_path)
    np.testing.assert_allclose(deployed, from_onnx, atol=1e-4, rtol=0)
    np.testing.assert_allclose(deployed, from_torch, atol=1e-4, rtol=0)
    # and a different seed really is a different rollout
    assert _play_returns(trained_onnx, 8, 1, tmp_path)[0] != pytest.approx(deployed[0], abs=1e-7)


def test_deploy_keeps_the_control_rate_and_reports_jitter(trained_onnx: Path) -> None:
    policy = OnnxPolicy(trained_onnx)
    robot = _robot(policy, 0)
    t0 = time.perf_counter()
    report = _deploy(policy, robot, 200, speed=10.0)
    wall = time.perf_counter() - t0
    d = report.to_dict()
    assert d["ok"] and d["period_s"] == pytest.approx(0.002)
    assert wall >= 199 * 0.002  # paced, not as fast as possible
    assert 0.0 <= d["period_error_mean_ms"] <= d["period_error_max_ms"]
    assert 0.0 <= d["period_error_p99_ms"] <= d["period_error_max_ms"]
    assert 0.0 < d["compute_mean_ms"] < 1e3


@pytest.mark.parametrize("bad", [np.nan, np.inf, 50.0])
def test_bad_action_holds_the_last_safe_command_and_stops(trained_onnx: Path, bad: float) -> None:
    policy = OnnxPolicy(trained_onnx)
    robot = _robot(policy, 0)
    sent: list[np.ndarray] = []

    def hooked(obs: np.ndarray) -> np.ndarray:
        action = policy(obs)
        if len(sent) == 40:
            action = np.full_like(action, bad)
        sent.append(action)
        return action

    report = _deploy(policy, robot, 100, speed=50.0, fn=hooked)
    assert report.stop_reason == BAD_ACTION and report.steps == 40
    assert robot.last_action is not None and np.all(np.isfinite(robot.last_action))
    last_good = np.clip(sent[39], -1.0, 1.0)
    np.testing.assert_array_equal(robot.last_action, last_good)
    assert report.held_action == pytest.approx(last_good.tolist())


def _doctor(src: Path, dst: Path) -> Path:
    """The same policy with NaN in its output bias: every action is NaN."""
    model = onnx.load(str(src))
    gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
    bias_name = gemms[-1].input[2]
    init = next(i for i in model.graph.initializer if i.name == bias_name)
    values = onnx.numpy_helper.to_array(init).copy()
    values[:] = np.nan
    init.CopyFrom(onnx.numpy_helper.from_array(values, bias_name))
    onnx.save(model, str(dst))
    return dst


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        "from unilab.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "print('TORCH_LOADED' if 'torch' in sys.modules else 'TORCH_FREE', file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_deploy_cli_runs_without_torch_and_stops_on_a_nan_policy(
    trained_onnx: Path, tmp_path: Path
) -> None:
    out = tmp_path / "deploy.json"
    ok = _cli(
        "deploy",
        str(trained_onnx),
        "--robot",
        "sim:cartpole_balance",
        "--steps",
        "300",
        "--speed",
        "20",
        "--out",
        str(out),
    )
    assert ok.returncode == 0, ok.stderr
    assert "TORCH_FREE" in ok.stderr
    report = json.loads(out.read_text())
    assert report["ok"] and report["steps"] == 300

    doctored = _doctor(trained_onnx, tmp_path / "nan_policy.onnx")
    bad = _cli("deploy", str(doctored), "--robot", "sim:cartpole_balance", "--steps", "50")
    assert bad.returncode == EXIT_SAFETY_STOP, bad.stderr
    assert "bad_action" in bad.stderr and "non-finite" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert json.loads(bad.stdout)["held_action"] == [0.0]  # nothing good was ever sent


def test_deploy_bad_input_is_one_message(trained_onnx: Path) -> None:
    from unilab.cli import main

    assert main(["deploy", str(trained_onnx), "--robot", "real:go1"]) == 2
    assert main(["deploy", str(trained_onnx), "--robot", "sim:quadruped_joystick_flat"]) == 2


def test_play_run_writes_the_end_of_training_media(trained_run: Path) -> None:
    from unilab.deploy.play import play_run

    result = play_run(trained_run, video=False, max_steps=120)
    assert result.steps == 120 and result.recorded_steps == 121
    assert result.rrd is not None and Path(result.rrd).name == "final_ckpt_000000045.rrd"
    assert (trained_run / "media" / "final_ckpt_000000045.json").is_file()
