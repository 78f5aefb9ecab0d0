"""Checkpoints and resume that never pair the wrong states (issue 12, items 1-5).

A run is trained once per module (in this process, workers as processes) and copied for
each test that changes it."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

from unilab.config import compose
from unilab.config.errors import ConfigError
from unilab.runtime.worker_state import parse_state_file
from unilab.train import IterationInfo, Runner, TrainHook
from unilab.train.run_lock import RunDirBusy, RunLock
from unilab.utils.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint

SMALL = [
    "sim.num_envs=16",
    "runtime.chunk_len=16",
    "logging.tensorboard=false",
    "run.quiet=true",
    "run.export=false",
    "run.seed=5",
]
DEAD_PID = 99_999_999  # above any pid_max: a writer that is certainly gone


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    steps = 16 * 16 * 6  # six iterations, a checkpoint after each (three kept)
    cfg = compose(
        [*SMALL, "run.checkpoint_every=1", f"run.total_env_steps={steps}", f"run.out_dir={out}"]
    )
    return Runner(cfg).learn().run.path


def _copy(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(run, dest)
    return dest


def test_worker_states_are_keyed_by_iteration_and_pruned_with_their_checkpoints(
    finished_run: Path,
) -> None:
    kept = [load_checkpoint(p)["iteration"] for p in list_checkpoints(finished_run / "checkpoints")]
    assert kept == [4, 5, 6]
    parsed = sorted(parse_state_file(p) for p in (finished_run / "worker_states").iterdir())
    # (worker, iteration, generation): those of the kept checkpoints, and possibly the one
    # the worker saved after a chunk that was made but never learned from (iteration 7).
    assert parsed[:3] == [(0, 4, 0), (0, 5, 0), (0, 6, 0)]
    assert parsed[3:] in ([], [(0, 7, 0)])


def test_resume_of_a_locked_run_directory_is_refused_before_writing(
    finished_run: Path, tmp_path: Path
) -> None:
    run = _copy(finished_run, tmp_path)
    before = (run / "config.yaml").read_bytes()
    with RunLock(run), pytest.raises(RunDirBusy, match="in use by another unilab process"):
        Runner(compose([f"resume={run}", "run.total_env_steps=4000"]))
    assert (run / "config.yaml").read_bytes() == before
    assert isinstance(RunDirBusy("x"), ConfigError)  # the CLI: one message, exit 2


def test_a_checkpoint_that_does_not_fit_is_named_and_the_previous_one_is_used(
    finished_run: Path, tmp_path: Path
) -> None:
    run = _copy(finished_run, tmp_path)
    # A newest checkpoint from a differently sized network (as after a changed override).
    other = Runner(compose([*SMALL, "algo.actor_hidden=[8,8,8]", f"run.out_dir={tmp_path / 'o'}"]))
    other.close()
    state = load_checkpoint(list_checkpoints(run / "checkpoints")[-1])
    state.update(iteration=7, algo=other.algo.state_dict())
    save_checkpoint(run / "checkpoints", 7, state, keep=0)
    runner = Runner(compose([f"resume={run}", "run.total_env_steps=4000"]))
    runner.close()
    assert runner.iteration == 6
    notes = "\n".join(runner.notes)
    assert "skipped checkpoint ckpt_000000007.pt: it does not fit this config" in notes
    assert "size mismatch for net." in notes or "key(s) in state_dict" in notes  # torch's detail
    assert "resumed from ckpt_000000006.pt at iteration 6 with worker states (bit-exact)" in notes
    assert not list((run / "worker_states").glob("*_it000000007_*"))  # the abandoned future


def test_a_resume_that_fits_no_checkpoint_leaves_config_yaml_alone(
    finished_run: Path, tmp_path: Path
) -> None:
    run = _copy(finished_run, tmp_path)
    before = (run / "config.yaml").read_bytes()
    with pytest.raises(ConfigError) as err:
        Runner(compose([f"resume={run}", "algo.critic_hidden=[7]"]))
    text = str(err.value)
    assert text.startswith("resume: no usable checkpoint in")
    assert text.count("does not fit this config") == 3
    assert (run / "config.yaml").read_bytes() == before
    Runner(compose([f"resume={run}"])).close()  # and the lock was released


def test_leftovers_of_a_crashed_writer_are_cleaned_at_start(
    finished_run: Path, tmp_path: Path
) -> None:
    run = _copy(finished_run, tmp_path)
    leftovers = [
        run / f"config.yaml.{DEAD_PID}.tmp",
        run / f"summary.json.{DEAD_PID}.tmp",
        run / "checkpoints" / "ckpt_000000009.pt.tmp",
        run / "worker_states" / "worker000_it000000007_gen000.npz.tmp.npz",
        run / "export" / f".exporting-{DEAD_PID}" / "policy.onnx",
    ]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"torn")
    live = run / f"metadata.json.{os.getpid() + 0}.tmp"  # our own pid: also a leftover
    runner = Runner(compose([f"resume={run}"]))
    runner.close()
    assert not any(p.exists() for p in leftovers)
    assert not (run / "export" / f".exporting-{DEAD_PID}").exists()
    assert not live.exists()
    assert any("leftover temp file" in n for n in runner.notes)


class FailingUpdate(TrainHook):
    """Makes the learner's update fail half-way at iteration `at`: parameters already
    changed, then the exception (what a bug or a second Ctrl-C inside `update` does)."""

    name = "failing_update"

    def __init__(self, at: int, exc: BaseException) -> None:
        self.at, self.exc = at, exc
        self.good: dict[int, dict[str, torch.Tensor]] = {}

    def on_start(self, runner: Runner) -> None:
        update = runner.algo.update

        def half_update(batch: dict[str, torch.Tensor]) -> dict[str, float]:
            if runner.iteration + 1 == self.at:
                with torch.no_grad():
                    for p in runner.algo.actor.parameters():
                        p.add_(1.0)
                raise self.exc
            return update(batch)

        runner.algo.update = half_update  # type: ignore[method-assign]

    def on_checkpoint(self, runner: Runner, path: Path) -> None:
        self.good[runner.iteration] = {
            k: v.clone() for k, v in runner.algo.actor.state_dict().items()
        }

    def on_iteration(self, runner: Runner, it: IterationInfo) -> None:
        pass


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(SystemExit(128 + signal.SIGINT), marks=pytest.mark.slow),  # same path
        RuntimeError("update blew up"),
    ],
    ids=["ctrl-c", "error"],
)
def test_a_failure_mid_update_keeps_the_last_good_checkpoint(
    tmp_path: Path, exc: BaseException, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = compose(
        [*SMALL, "run.checkpoint_every=2", "run.total_env_steps=4096", f"run.out_dir={tmp_path}"]
    )
    hook = FailingUpdate(at=3, exc=exc)
    runner = Runner(cfg, [hook])
    with pytest.raises(type(exc)):
        runner.learn()
    ckpts = list_checkpoints(runner.run.checkpoints)
    assert [p.name for p in ckpts] == ["ckpt_000000002.pt"]
    saved = load_checkpoint(ckpts[0])["algo"]["actor"]
    for key, value in hook.good[2].items():
        assert torch.equal(saved[key], value), f"{key} was overwritten by a half-updated learner"
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "no checkpoint taken of a learner that may be mid-update" in err
    assert "the last good checkpoint is ckpt_000000002.pt" in err


class KillWorkerAt(TrainHook):
    """SIGKILLs worker 0 after iteration `at` (the supervisor respawns it)."""

    name = "kill_worker"

    def __init__(self, at: int) -> None:
        self.at = at

    def on_iteration(self, runner: Runner, it: IterationInfo) -> None:
        if it.iteration == self.at:
            assert runner.runtime is not None and runner.runtime.supervisor is not None
            pid = runner.runtime.supervisor.pids()[0]
            assert pid is not None
            os.kill(pid, signal.SIGKILL)


def test_resume_after_a_worker_was_killed_says_it_is_not_bit_exact(tmp_path: Path) -> None:
    steps = 16 * 16
    common = [*SMALL, "run.checkpoint_every=2", f"run.out_dir={tmp_path}"]
    first = Runner(compose([*common, f"run.total_env_steps={6 * steps}"]), [KillWorkerAt(2)])
    result = first.learn()
    assert result.summary["supervisor"]["restarts"] >= 1
    newest = load_checkpoint(list_checkpoints(result.run.checkpoints)[-1])
    assert newest["iteration"] == 6 and newest["worker_restarts"] >= 1
    # the respawned worker's states carry its generation
    gens = {parse_state_file(p)[2] for p in (result.run.path / "worker_states").iterdir()}
    assert max(gens) >= 1
    resumed = Runner(compose([f"resume={result.run.path}", f"run.total_env_steps={8 * steps}"]))
    resumed.close()
    notes = "\n".join(resumed.notes)
    assert (
        "resumed from ckpt_000000006.pt at iteration 6 with worker states; not bit-exact" in notes
    )
    assert "differ from an uninterrupted run" in notes
