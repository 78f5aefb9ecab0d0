"""A VLA at the operator station: the simulated robot serves the task's own camera frames
and instruction, the station feeds them to an exported VLA (ids from the vocabulary
exported with it) and its chunk executor gives the very actions the torch-free runner
gives, mismatches are refused before anything moves, and a scripted session over loopback
records episodes with exact takeover labels, camera frames and their instruction."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hil_fixtures import Keys

from unilab.data import EpisodeStore
from unilab.deploy.sim_driver import SimDriver
from unilab.deploy.sim_task import make_task_from_dicts
from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy
from unilab.export.vla_onnx import export_vla_onnx
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.policy import VLAPolicy
from unilab.tasks.instructions import Vocabulary
from unilab.tasks.vocabulary import WORDS
from unilab.teleop.policy_runner import HilPolicy, PolicyMismatchError, load_hil_policy
from unilab.teleop.session_tools import compare_labels, free_port_pair, run_scripted_session

TASK = "arm_move_side"
EPISODE_FRAMES = 40  # arm_move_side at 20 Hz with episode_length_s=2
SIZE = 64  # the tabletop tasks' observation cameras
HOST_ARGS = (
    "--task", "episode_length_s=2", "--camera", "front", "--camera-every", "1",
    "--watchdog-periods", "10",
)  # fmt: skip


@pytest.fixture(scope="module")
def task_shapes() -> tuple[int, int, list[str]]:
    task = make_task_from_dicts({"name": TASK}, {}, 1, 0)
    return int(task.obs_dims["policy"]), int(task.action_dim), list(task.instructions.texts)


@pytest.fixture(scope="module")
def vla_onnx(tmp_path_factory: pytest.TempPathFactory, task_shapes: tuple[int, int, Any]) -> Path:
    proprio, action_dim, _ = task_shapes
    torch.manual_seed(0)
    inputs = VLAInputs(
        proprio_dim=proprio, action_dim=action_dim, cameras={"front": (SIZE, SIZE)},
        vocab_size=len(WORDS), pad_id=0, instruction_len=16,
    )  # fmt: skip
    cfg = VLAConfig(
        horizon=4, num_steps=2, n_act=2, width=32, heads=2, prefix_layers=1, expert_layers=1,
        image_channels=[8], image_tokens_side=2,
    )  # fmt: skip
    policy = VLAPolicy(inputs, cfg).eval()
    path = tmp_path_factory.mktemp("vla") / "policy.onnx"
    return export_vla_onnx(policy, path, vocabulary=list(WORDS))


def test_sim_driver_serves_the_tasks_own_frames_and_instruction() -> None:
    reference = make_task_from_dicts({"name": TASK}, {}, 1, 0).reset()
    driver = SimDriver(TASK, cameras=("front",))
    driver.connect()
    try:
        assert driver.cameras["front"].shape == (SIZE, SIZE, 3)
        frame = driver.read_cameras()["front"]
        assert frame.dtype == np.uint8
        assert np.array_equal(frame, reference["images/front"][0])  # no re-render: the same pixels
        # vector groups only on the wire; images and ids travel as frames and text
        assert set(driver.observe()) == {"policy", "critic"} == set(driver.obs_dims)
        text = driver.instruction
        assert text
        ids = Vocabulary(WORDS).encode(text, 16)
        assert np.array_equal(ids, reference["instruction"][0])
    finally:
        driver.disconnect()


def _observation(seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], str]:
    task = make_task_from_dicts({"name": TASK}, {}, 1, seed)
    obs = task.reset()
    text = task.instruction_text()[0]
    station_obs = {"policy": obs["policy"][0], "images/front": obs["images/front"][0]}
    batch = {k: obs[k] for k in ("policy", "images/front", "instruction")}
    return station_obs, batch, text


def test_the_station_policy_acts_as_the_onnx_executor_on_the_tasks_ids(vla_onnx: Path) -> None:
    hil = load_hil_policy(vla_onnx, seed=5)
    assert hil.cameras == ("front",) and hil.reads_instruction
    reference = OnnxVLAPolicy(vla_onnx).executor(num_envs=1, seed=5)
    for step in range(5):  # n_act=2: re-plans at steps 0, 2 and 4
        station_obs, batch, text = _observation(step)
        got = hil(station_obs, text).action
        np.testing.assert_array_equal(got, reference(batch)[0])
    # a takeover resets the chunk: both re-plan on the next observation
    hil.reset()
    reference.reset()
    station_obs, batch, text = _observation(9)
    np.testing.assert_array_equal(hil(station_obs, text).action, reference(batch)[0])


def _robot(action_dim: int, proprio: int, cameras: dict[str, list[int]]) -> dict[str, Any]:
    return {
        "action_names": [f"a{i}" for i in range(action_dim)],
        "obs_dims": {"policy": proprio, "critic": 63},
        "cameras": cameras,
    }


def test_mismatches_are_refused_with_what_would_fit(
    vla_onnx: Path, task_shapes: tuple[int, int, Any]
) -> None:
    proprio, action_dim, _ = task_shapes
    hil: HilPolicy = load_hil_policy(vla_onnx)
    hil.check_robot(_robot(action_dim, proprio, {"front": [SIZE, SIZE, 3]}))
    with pytest.raises(PolicyMismatchError, match="--camera front"):
        hil.check_robot(_robot(action_dim, proprio, {"scene": [48, 64, 3]}))
    with pytest.raises(PolicyMismatchError, match="streams it as 48x64x3"):
        hil.check_robot(_robot(action_dim, proprio, {"front": [48, 64, 3]}))
    with pytest.raises(PolicyMismatchError, match=f"outputs {action_dim} actions"):
        hil.check_robot(_robot(action_dim + 1, proprio, {"front": [SIZE, SIZE, 3]}))
    with pytest.raises(PolicyMismatchError, match=f"width {proprio}"):
        hil.check_robot(_robot(action_dim, proprio - 1, {"front": [SIZE, SIZE, 3]}))
    with pytest.raises(PolicyMismatchError, match="--instruction"):
        hil.check_instruction(None)
    with pytest.raises(PolicyMismatchError, match="zebra"):
        hil.check_instruction("move the zebra left")
    station_obs, _, _ = _observation(0)
    with pytest.raises(PolicyMismatchError, match="--instruction"):
        hil(station_obs, None)


def test_a_scripted_vla_session_records_labels_frames_and_instructions(
    keys: Keys, vla_onnx: Path, task_shapes: tuple[int, int, list[str]], tmp_path: Path
) -> None:
    _, _, texts = task_shapes
    fed: list[tuple[str | None, tuple[int, ...], str]] = []

    def observe(policy: HilPolicy) -> None:
        inner = policy.fn

        def logged(obs: dict[str, np.ndarray], instruction: str | None = None) -> Any:
            img = obs["images/front"]
            fed.append((instruction, img.shape, str(img.dtype)))
            return inner(obs, instruction)

        policy.fn = logged

    store = tmp_path / "hil.zarr"
    report, operator = run_scripted_session(
        keys,
        vla_onnx,
        store,
        tmp_path,
        duration_s=10.0,
        seed=4,
        horizon=EPISODE_FRAMES,
        script={},
        robot=f"sim:{TASK}",
        host_args=HOST_ARGS,
        observe=observe,
    )
    check = compare_labels(store, operator, EPISODE_FRAMES)
    assert check.exact, check
    assert check.episodes == report["episodes_saved"] >= 2 and check.spans >= 1
    assert fed and all(shape == (SIZE, SIZE, 3) and dtype == "uint8" for _, shape, dtype in fed)
    assert {text for text, _, _ in fed} <= set(texts)
    with EpisodeStore.open(store) as st:
        stored = set()
        policy_frames = 0
        for i in range(len(st)):
            meta = st.meta(i)
            assert meta.language_instruction in texts
            stored.add(meta.language_instruction)
            ep = st.episode(i, ["is_intervention", "images/front"])
            policy_frames += int((~ep["is_intervention"]).sum())
            assert ep["images/front"].shape[1:] == (SIZE, SIZE, 3)
            assert ep["images/front"].max() > 0  # real frames, not the recorder's blank start
    assert policy_frames > 0
    assert {text for text, _, _ in fed} & stored


def test_hil_run_starts_a_host_streaming_the_cameras_the_vla_reads(
    keys: Keys, vla_onnx: Path, tmp_path: Path
) -> None:
    store, report_path = tmp_path / "cli.zarr", tmp_path / "report.json"
    cmd = [
        sys.executable, "-m", "unilab.cli", "hil", "run", "--robot", f"sim:{TASK}",
        "--policy", str(vla_onnx), "--key", keys.secret("alice"),
        "--server-key", keys.public("robot"),
        "--endpoint", f"tcp://127.0.0.1:{free_port_pair()}", "--start-host",
        "--host-key", keys.secret("robot"), "--allow", str(keys.allow),
        "--host-args=--task episode_length_s=2", "--device", "virtual:2", "--duration", "6",
        "--auto-resume",
        "--store", str(store), "--report", str(report_path),
    ]  # fmt: skip
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["commands"] > 50 and report["episodes_saved"] >= 1
    with EpisodeStore.open(store) as st:
        assert "images/front" in st.schema.fields  # the host streamed the VLA's camera
        ep = st.episode(0, ["images/front", "is_intervention"])
        assert ep["images/front"].max() > 0 and (~ep["is_intervention"]).any()
