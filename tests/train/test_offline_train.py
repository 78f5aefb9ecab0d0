"""`unilab train algo=bc_flow data.store=...` on real expert demonstrations: the offline
loop writes what an RL run writes (checkpoints, metrics, TensorBoard, summary, export,
media), resumes bit-exactly, stops cleanly on Ctrl-C, refuses unusable stores before it
writes anything, and its runs play, evaluate and deploy (torch-free) with chunked
execution."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.bench.expert_demos import write_expert_store
from unilab.cli import main
from unilab.config import compose
from unilab.config.errors import ConfigError
from unilab.tasks.vocabulary import WORDS
from unilab.train import Runner, TrainHook
from unilab.train.hooks import IterationInfo
from unilab.utils.checkpoint import list_checkpoints, load_checkpoint
from unilab.utils.metrics import read_metrics
from unilab.workflows.offline_data import open_frames

TASK = ["task=arm_move_side", "task.cameras=[front]", "task.image_size=32"]
TINY = [
    "algo.batch_size=16",
    "algo.warmup_steps=2",
    "algo.model.width=32",
    "algo.model.heads=2",
    "algo.model.image_channels=[8,16]",
    "algo.model.image_tokens_side=2",
    "algo.model.horizon=8",
    "algo.model.n_act=4",
    "algo.model.num_steps=3",
    "algo.model.prefix_layers=1",
    "algo.model.expert_layers=1",
    "runtime.learner_threads=1",
    "run.quiet=true",
]


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demos") / "move_side.zarr"
    report = write_expert_store(path, "arm_move_side", 6, overrides=TASK[1:], seed=0)
    assert report.episodes == 6 and report.frames > 6 * 30
    return path


def _tokens(store: Path, out: Path, *extra: str) -> list[str]:
    return [*TASK, "algo=bc_flow", f"data.store={store}", *TINY, f"run.out_dir={out}", *extra]


def _run_dir(out: Path, algo: str = "bc_flow") -> Path:
    (run,) = list((out / "arm_move_side" / algo).iterdir())
    return run


def test_the_vocabulary_size_comes_from_the_task() -> None:
    cfg = compose(["task=arm_move_side"])
    assert cfg.algo.name == "bc_flow" and cfg.algo.vocab_size == len(WORDS)
    assert compose(["task=cartpole_balance", "algo=bc_flow"]).algo.vocab_size == 0


def test_algo_tokens_sets_the_models_token_count() -> None:
    assert compose(["task=arm_move_side", "algo.tokens=6"]).algo.model.n_tokens == 6
    assert compose(["task=arm_move_side"]).algo.model.n_tokens == 0
    with pytest.raises(ConfigError, match=r"tokens=6 disagrees with model\.n_tokens=4"):
        compose(["task=arm_move_side", "algo.tokens=6", "algo.model.n_tokens=4"])


def test_unilab_train_bc_flow_end_to_end_then_eval_and_deploy(demos: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    argv = _tokens(
        demos,
        out,
        "algo.steps=20",
        "algo.val_every=10",
        "run.checkpoint_every=10",
        "logging.log_every=5",
        "eval.every=10",
        "eval.episodes=2",
        "run.play_episodes=1",
    )
    t0 = time.perf_counter()
    assert main(["train", *argv]) == 0
    assert time.perf_counter() - t0 < 90
    run = _run_dir(out)
    assert [load_checkpoint(p)["iteration"] for p in list_checkpoints(run / "checkpoints")] == [
        10,
        20,
    ]
    assert any((run / "tb").iterdir())
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [5, 10, 15, 20]
    assert all("algo/flow_loss" in r and "train/samples_per_s" in r for r in rows)
    for r in (rows[1], rows[3]):  # validation and in-sim evaluation every 10 steps
        assert r["val/loss"] > 0 and r["val/frames"] > 0
        assert 0.0 <= r["eval/success_rate"] <= 1.0 and r["eval/length_mean"] > 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 20 and summary["stop_reason"] == "budget"
    assert summary["validation"]["val_loss"] == rows[-1]["val/loss"]
    assert (run / "summary.txt").read_text().startswith("done: 20 gradient steps")
    # export at the end: the VLA graph with its metadata, checked against torch
    meta = json.loads((run / "export" / "metadata.json").read_text())
    vla = meta["vla"]
    assert vla["cameras"] == {"front": [32, 32]} and vla["vocabulary"] == list(WORDS)
    assert (vla["horizon"], vla["num_steps"], vla["n_act"]) == (8, 3, 4)
    assert vla["inputs"] == ["policy", "image_front", "instruction", "noise"]
    assert meta["onnx_max_abs_diff"] <= 1e-4 and meta["task"] == "arm_move_side"
    assert not (run / "export" / "policy.pt").exists()
    assert list((run / "media").glob("*.mp4")) and list((run / "media").glob("*.rrd"))

    # eval of the checkpoint (torch) and of the export (onnxruntime): the same episodes
    reports = []
    for target in (run, run / "export" / "policy.onnx"):
        path = tmp_path / f"eval_{len(reports)}.json"
        assert (
            main(["eval", str(target), "--episodes", "3", "--seeds", "0,1", "--out", str(path)])
            == 0
        )
        reports.append(json.loads(path.read_text()))
    torch_run, onnx_run = reports
    executed = {"n_act": 4, "ensemble_decay": None, "noise_seed": "seed"}
    assert torch_run["execution"] == {**executed, "flow_steps": 3}  # K of the run's config
    assert onnx_run["execution"] == executed  # the export's K is inside its graph
    assert [e["length"] for e in torch_run["episodes"]] == [
        e["length"] for e in onnx_run["episodes"]
    ]
    np.testing.assert_allclose(
        [e["return"] for e in torch_run["episodes"]],
        [e["return"] for e in onnx_run["episodes"]],
        atol=1e-3,
    )

    # deploy: the exported VLA against a simulated robot, no torch in the process
    code = (
        "import sys\n"
        "from unilab.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "print('TORCH_LOADED' if 'torch' in sys.modules else 'TORCH_FREE', file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    report_path = tmp_path / "deploy.json"
    args = ["deploy", str(run / "export" / "policy.onnx"), "--robot", "sim:arm_move_side"]
    args += ["--steps", "220", "--speed", "1000", "--max-action", "100", "--out", str(report_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TORCH_FREE" in done.stderr
    deployed = json.loads(report_path.read_text())
    assert deployed["stop_reason"] == "completed" and deployed["steps"] == 220
    assert len(deployed["episodes"]["returns"]) >= 1  # an episode ended and a new one began


class StopAt(TrainHook):
    name = "stop_at"

    def __init__(self, step: int) -> None:
        self.step = step

    def on_iteration(self, runner: Runner, it: IterationInfo) -> None:
        if it.iteration == self.step:
            runner.request_stop()


def _train(cfg_tokens: list[str], hooks: list[TrainHook] = ()) -> Path:  # type: ignore[assignment]
    cfg = compose(cfg_tokens)
    frames = open_frames(cfg)
    try:
        result = Runner(cfg, hooks, frames=frames).learn()
    finally:
        frames.close()
    return result.run.path


def _learner_state(run: Path) -> dict[str, torch.Tensor]:
    state = load_checkpoint(list_checkpoints(run / "checkpoints")[-1])["algo"]
    out = {f"policy.{k}": v for k, v in state["policy"].items()}
    out.update({f"actor.{k}": v for k, v in state["actor"].items()})
    return out


def test_n_steps_then_resume_then_n_more_equals_2n_straight(demos: Path, tmp_path: Path) -> None:
    n = 6
    common = ["algo.steps=12", "algo.val_every=4", "run.checkpoint_every=4", "run.export=false"]
    common += ["run.seed=3", "logging.tensorboard=false", "logging.log_every=1"]
    straight = _train(_tokens(demos, tmp_path / "a", *common))
    first = _train(_tokens(demos, tmp_path / "b", *common), [StopAt(n)])
    summary = json.loads((first / "summary.json").read_text())
    assert summary["stop_reason"] == "stopped" and summary["steps"] == n
    assert load_checkpoint(list_checkpoints(first / "checkpoints")[-1])["iteration"] == n
    resumed = _train([f"resume={first}"])
    assert resumed == first
    assert load_checkpoint(list_checkpoints(resumed / "checkpoints")[-1])["iteration"] == 2 * n
    a, b = _learner_state(straight), _learner_state(resumed)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs after resume"
    halfway = load_checkpoint(list_checkpoints(first / "checkpoints")[0])["algo"]["policy"]
    assert any(not torch.equal(halfway[k], a[f"policy.{k}"]) for k in halfway)  # it moved
    steps = [r["step"] for r in read_metrics(resumed / "metrics.jsonl")]
    # the resumed run appends its rows (the first one's end added a validation row at n)
    assert sorted(set(steps)) == list(range(1, 2 * n + 1)) and steps[-1] == 2 * n


def _cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_unusable_stores_are_config_errors_before_anything_is_written(
    demos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    base = [*TASK, "algo=bc_flow", *TINY, f"run.out_dir={out}"]
    assert "set data.store=PATH" in _cli_error(base, capsys)
    assert "no such episode store" in _cli_error([*base, f"data.store={tmp_path}/none"], capsys)
    (tmp_path / "empty_dir").mkdir()
    assert "cannot be read as an episode store" in _cli_error(
        [*base, f"data.store={tmp_path / 'empty_dir'}"], capsys
    )
    err = _cli_error([*base, f"data.store={demos}", "task.cameras=[front,wrist]"], capsys)
    assert "lacks field(s) ['images/wrist']" in err and "'images/front'" in err
    err = _cli_error([*base, f"data.store={demos}", "task.image_size=48"], capsys)
    assert "images/front is (32, 32, 3) per frame, the policy wants (48, 48, 3)" in err
    err = _cli_error([*base, f"data.store={demos}", "logging.record_store=x.zarr"], capsys)
    assert "logging.record_store records training rollouts" in err
    assert not out.exists()
    with pytest.raises(ConfigError, match="was given no frames"):
        Runner(compose([*base, f"data.store={demos}"]))


def test_ctrl_c_writes_the_final_checkpoint(demos: Path, tmp_path: Path) -> None:
    argv = _tokens(demos, tmp_path, "algo.steps=100000", "run.checkpoint_every=100000")
    argv += ["run.export=false", "logging.tensorboard=false", "algo.val_every=100000"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "unilab.cli", "train", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + 120
    metrics: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        metrics = list(tmp_path.glob("arm_move_side/bc_flow/*/metrics.jsonl"))
        if metrics and len(metrics[0].read_text().splitlines()) >= 3:
            break
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    run = metrics[0].parent
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "signal" and summary["steps"] >= 3
    (final,) = list_checkpoints(run / "checkpoints")
    assert load_checkpoint(final)["iteration"] == summary["steps"]


def test_bc_mse_trains_exports_and_evaluates_the_same_way(demos: Path, tmp_path: Path) -> None:
    argv = [*TASK, "algo=bc_mse", f"data.store={demos}", *TINY, f"run.out_dir={tmp_path}"]
    argv += ["algo.steps=6", "algo.val_every=3", "run.play_episodes=0"]
    assert main(["train", *argv]) == 0
    run = _run_dir(tmp_path, "bc_mse")
    meta = json.loads((run / "export" / "metadata.json").read_text())
    assert meta["vla"]["head"] == "mse" and "noise" not in meta["vla"]["inputs"]
    rows = read_metrics(run / "metrics.jsonl")
    assert "algo/mse_loss" in rows[-1] and "val/action_mse" in rows[-1]
    out = tmp_path / "eval.json"
    assert main(["eval", str(run / "export"), "--episodes", "2", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["num_episodes"] == 2
