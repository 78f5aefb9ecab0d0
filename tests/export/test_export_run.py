"""`export_run` / `unilab export` on a run directory made by the real training loop."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.algos.registry import ALGORITHMS
from unilab.cli import main
from unilab.config import compose
from unilab.config.compose import config_from_yaml
from unilab.deploy.onnx_policy import OnnxPolicy
from unilab.export import run_export
from unilab.export.onnx_export import ExportError
from unilab.export.run_export import export_run, probe_observations
from unilab.export.torchscript_export import load_torchscript
from unilab.train import train
from unilab.train.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    cfg = compose(
        [
            "run.total_env_steps=2048",
            "sim.num_envs=16",
            "runtime.chunk_len=16",
            "run.checkpoint_every=4",
            "run.quiet=true",
            "run.export=false",
            "logging.tensorboard=false",
            f"run.out_dir={out}",
        ]
    )
    return train(cfg).path


def _actor_from(ckpt: Path) -> torch.nn.Module:
    state = load_checkpoint(ckpt)
    cfg = config_from_yaml(state["config"])
    actor = ALGORITHMS.get(cfg.algo.name).algo_cls.build_actor(cfg.algo, {"policy": 5}, 1)
    actor.load_state_dict(state["algo"]["actor"])
    return actor.eval()


def test_export_run_writes_onnx_torchscript_and_metadata(run_dir: Path) -> None:
    paths = export_run(run_dir)
    assert paths["onnx"] == run_dir / "export" / "policy.onnx"
    assert paths["torchscript"] == run_dir / "export" / "policy.pt"
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    actor = _actor_from(newest)
    policy = OnnxPolicy(paths["onnx"])
    obs = probe_observations(actor, {"policy": 5}, 1000, seed=3)["policy"]
    with torch.no_grad():
        expected = actor(torch.from_numpy(obs)).numpy()
    assert np.max(np.abs(policy(obs) - expected)) <= 1e-5
    meta = policy.metadata
    assert meta.checkpoint["file"] == newest.name
    assert meta.checkpoint["iteration"] == load_checkpoint(newest)["iteration"]
    assert meta.algorithm == "ppo" and meta.task == "cartpole_balance"
    assert meta.sim_config["num_envs"] == 16
    module, text = load_torchscript(paths["torchscript"])
    with torch.no_grad():
        assert (
            float((module(torch.from_numpy(obs)) - torch.from_numpy(expected)).abs().max()) < 1e-6
        )
    assert json.loads(text) == json.loads(paths["metadata"].read_text())


def test_export_skips_a_corrupt_newest_checkpoint(run_dir: Path, tmp_path: Path) -> None:
    ckpts = list_checkpoints(run_dir / "checkpoints")
    assert len(ckpts) >= 2
    copy = tmp_path / "run"
    (copy / "checkpoints").mkdir(parents=True)
    for ckpt in ckpts:
        (copy / "checkpoints" / ckpt.name).write_bytes(ckpt.read_bytes())
    newest = copy / "checkpoints" / ckpts[-1].name
    newest.write_bytes(newest.read_bytes()[:100])  # torn write
    paths = export_run(copy)
    assert OnnxPolicy(paths["onnx"]).metadata.checkpoint["file"] == ckpts[-2].name


def test_export_cli(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "exported"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    assert (out / "policy.onnx").is_file() and (out / "policy.pt").is_file()
    assert str(out / "policy.onnx") in capsys.readouterr().out
    assert main(["export", str(tmp_path / "missing")]) == 2
    assert "run directory not found" in capsys.readouterr().err
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    assert main(["export", str(tmp_path / "empty")]) == 2
    assert "no usable checkpoint" in capsys.readouterr().err


def test_a_failed_export_keeps_the_previous_one_and_no_leftovers(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    first = export_run(run)
    before = {k: p.read_bytes() for k, p in first.items()}
    # A newer checkpoint with other weights, whose export then fails its onnxruntime check.
    state = load_checkpoint(list_checkpoints(run / "checkpoints")[-1])
    actor = state["algo"]["actor"]
    state["algo"]["actor"] = {k: v * 1.05 if k.startswith("net.") else v for k, v in actor.items()}
    state["iteration"] += 1
    save_checkpoint(run / "checkpoints", state["iteration"], state)
    monkeypatch.setattr(run_export, "TOLERANCE", -1.0)
    with pytest.raises(ExportError, match="the previous export is kept"):
        export_run(run)
    assert {k: p.read_bytes() for k, p in first.items()} == before
    assert not list((run / "export").glob(".exporting-*"))
    monkeypatch.undo()
    assert export_run(run)["onnx"].read_bytes() != before["onnx"]  # a good export replaces it
