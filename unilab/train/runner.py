"""The learner process's loop as a `Runner`: build, `learn()`, `save()`, `load()`, `log()`.

    runner = Runner(cfg, hooks=[EvalHook(every=10)])   # run dir, probe, algorithm (+ resume)
    result = runner.learn()                            # loop, final checkpoint, summary

Building composes the run: seeds, a one-env probe of the task for its shapes, the
algorithm, the run directory (locked) and (with `run.resume`) the newest good checkpoint.
What an iteration is depends on the algorithm, and the Runner delegates it to a loop
(`unilab.train.loops`): RL algorithms run `RolloutLoop` (sim workers, ring buffer, weight
publishing; one iteration = one batch of chunks), offline algorithms (`Algorithm.offline`:
bc_flow, bc_mse) run `OfflineLoop` over an episode store's frames (one iteration = one
gradient step; `frames=` is the store's `FrameDataset`, which `unilab.workflows.train`
opens from `data.store`). Everything else is shared: checkpoints every
`run.checkpoint_every` iterations and at the end, resume, metrics.jsonl + TensorBoard, the
progress bar, SIGINT/SIGTERM (final checkpoint, exit 128 + signal), summary.json/txt, and
the hooks (`unilab.train.hooks`): recording, Rerun, mid-run evaluation, export and play;
`unilab.workflows.train` attaches the standard ones for `unilab train`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.algos.base import Algorithm
from unilab.algos.build import build_policy, policy_obs_shapes
from unilab.algos.registry import ALGORITHMS
from unilab.config.compose import to_yaml
from unilab.config.errors import ConfigError
from unilab.config.schema import Config
from unilab.runtime.fields import FieldSpecs
from unilab.runtime.learner_side import LearnerRuntime
from unilab.runtime.signals import StopSignal, install_signal_handlers
from unilab.runtime.source import ChunkSource
from unilab.runtime.torch_policy import PolicyModule
from unilab.train.distributed import SINGLE_WORLD, World
from unilab.train.hooks import RunResult, TrainHook
from unilab.train.loops import TrainLoop
from unilab.train.rollout_loop import RETURN_WINDOW, RolloutLoop, info_means
from unilab.train.run_dir import RunDir, open_run_dir
from unilab.train.run_lock import RunLock
from unilab.utils.atomic import atomic_write_text, remove_leftovers
from unilab.utils.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from unilab.utils.device import DeviceError, describe, select_device
from unilab.utils.metrics import MetricsLogger
from unilab.utils.profiler import Profiler
from unilab.utils.progress import TrainingProgress

__all__ = ["RETURN_WINDOW", "Runner", "TaskShapes", "info_means", "probe_task"]


@dataclass(frozen=True)
class TaskShapes:
    """What the learner needs to know about the task, from a one-env probe."""

    obs_dims: dict[str, int]
    """Widths of the float32 vector groups (policy, critic)."""
    action_dim: int
    metadata: dict[str, Any]
    reward_terms: list[str]
    """Reward term names in sorted order (the `reward_terms` field's columns)."""
    task_metrics: list[str]
    """Task metric names in sorted order (the `task_metrics` field's columns)."""
    obs_shapes: dict[str, tuple[int, ...]]
    """Every observation group's per-env shape (images (H, W, 3), instruction (L,), ...)."""
    vocabulary: tuple[str, ...] = ()
    """The task's instruction words (id = index)."""
    reset_bins: int = 1
    """The task's reset bins (`Task.num_reset_bins`; 1: none)."""


def probe_task(cfg: Config) -> TaskShapes:
    """Build `cfg`'s task with one env for its shapes; a task refusing its config is a
    ConfigError (before any file is written)."""
    from unilab.tasks.registry import make_task

    try:
        probe = make_task(cfg.task, num_envs=1, seed=cfg.run.seed, sim_cfg=cfg.sim)
        probe.reset()
    except ConfigError:
        raise
    except ValueError as exc:  # a task rejecting its config: before any file is written
        raise ConfigError(f"task {cfg.task.name!r} cannot be built: {exc}") from None
    return TaskShapes(
        obs_dims=dict(probe.obs_dims),
        action_dim=int(probe.action_dim),
        metadata=probe.metadata(),
        reward_terms=sorted(probe.reward_weights),
        task_metrics=sorted(probe.task_metrics()),
        obs_shapes={k: tuple(v.shape) for k, v in probe.observation_spec().items()},
        vocabulary=tuple(probe.vocabulary),
        reset_bins=int(probe.num_reset_bins),
    )


class Runner:
    def __init__(
        self,
        cfg: Config,
        hooks: Iterable[TrainHook] = (),
        *,
        source: ChunkSource | None = None,
        frames: Any = None,
        world: World = SINGLE_WORLD,
    ) -> None:
        """`source`: chunks instead of sim workers (RL; tests). `frames`: the frame source
        an offline algorithm learns from (a `FrameDataset` over `data.store`). `world`: the
        learner processes under torchrun; this Runner is rank 0 (unilab.train.distributed)."""
        self.cfg = cfg
        self.hooks: list[TrainHook] = list(hooks)
        self.world = world
        try:
            self.device = world.device if world.active else select_device(cfg.device)
        except DeviceError as exc:
            raise ConfigError(str(exc)) from None
        self.algo_cls: type[Algorithm] = ALGORITHMS.get(cfg.algo.name).algo_cls
        if world.active and not self.algo_cls.supports_data_parallel:
            raise ConfigError(world.unsupported(cfg.algo.name))
        self.runtime: LearnerRuntime | None = None
        """The sim workers' runtime (RL loops; None for offline algorithms)."""
        self.loop: TrainLoop = self._make_loop(source, frames)
        if self.device.type == "cpu":
            threads = cfg.runtime.learner_threads or self.loop.learner_threads(os.cpu_count() or 1)
            torch.set_num_threads(max(1, threads))
        torch.manual_seed(cfg.run.seed)
        np.random.seed(cfg.run.seed % 2**32)
        random.seed(cfg.run.seed)
        self.shapes = probe_task(cfg)
        self.algo: Algorithm = self._new_algo()
        self.loop.check_inputs()
        self.iteration = 0
        """Learner iterations done: batches of chunks (RL) or gradient steps (offline)."""
        self.env_steps = 0
        self.stop_requested: str | None = None
        """Set by `request_stop`: the loop ends after the current iteration."""
        self.resumed_from: Path | None = None
        """The checkpoint `run.resume` continued from."""
        self.run: RunDir = open_run_dir(cfg)
        self._lock = RunLock(self.run.path).acquire()
        try:
            self.notes: list[str] = [
                f"device: {describe(self.device)}",
                f"run directory: {self.run.path}",
            ]
            removed = remove_leftovers(self.run.path)
            if removed:
                self.notes.append(f"removed {len(removed)} leftover temp file(s) of a crashed run")
            if cfg.run.resume:
                self.resumed_from = self.load()
            # Only now: a resume that fails leaves the run's config.yaml as it was.
            atomic_write_text(self.run.config, to_yaml(cfg))
        except BaseException:
            self._lock.release()
            raise
        self.last_checkpoint: Path | None = None
        """The newest checkpoint this Runner wrote."""
        self.prof = Profiler()
        self._logger: MetricsLogger | None = None

    def _make_loop(self, source: ChunkSource | None, frames: Any) -> TrainLoop:
        name = self.cfg.algo.name
        if not getattr(self.algo_cls, "offline", False):
            if frames is not None:
                raise ConfigError(f"algo={name} learns from rollouts; it takes no frames")
            return RolloutLoop(self, source)
        if source is not None:
            raise ConfigError(f"algo={name} learns offline from frames; it takes no chunk source")
        from unilab.train.offline_loop import OfflineLoop

        return OfflineLoop(self, frames)

    # -- the pieces --------------------------------------------------------------------------
    @property
    def policy(self) -> PolicyModule:
        """The learner's actor (on the learner device): what is published and exported."""
        return self.algo.actor

    def cpu_policy(self) -> PolicyModule:
        """A CPU copy of the current policy (for rollouts in this process)."""
        return build_policy(self.cfg.algo, self.shapes, weights=self.algo.actor)

    def chunk_fields(self, with_info: bool = True) -> FieldSpecs:
        """The fields each chunk carries (RL): the algorithm's, reward terms, task metrics."""
        if not isinstance(self.loop, RolloutLoop):
            raise ValueError(f"algo={self.cfg.algo.name} learns offline: it collects no chunks")
        return self.loop.chunk_fields(with_info)

    def build_runtime(self) -> LearnerRuntime:
        """The RL runtime (sim workers, ring), built but not started."""
        if not isinstance(self.loop, RolloutLoop):
            raise ValueError(f"algo={self.cfg.algo.name} learns offline: it starts no workers")
        self.loop.prepare()
        assert self.runtime is not None
        return self.runtime

    def add_hook(self, hook: TrainHook) -> None:
        self.hooks.append(hook)

    def request_stop(self, reason: str = "stopped") -> None:
        """End the run after the current iteration, with a final checkpoint (e.g. a hook
        that found what it waited for); the run's stop reason is `stopped`."""
        self.stop_requested = reason

    def load(self, directory: Path | None = None) -> Path:
        """Continue from the newest checkpoint in `directory` (default: this run's) that
        reads and fits this config: algorithm state, counters, RNG states, and what the
        loop keeps (RL sync mode: the workers' states saved at that iteration). A
        checkpoint that is unreadable or whose shapes do not fit is named and the one before
        it is tried; none: a ConfigError."""
        directory = directory or self.run.checkpoints
        problems: list[str] = []
        for path in reversed(list_checkpoints(directory)):
            try:
                state = load_checkpoint(path, map_location=self.device)
                self.algo.load_state_dict(state["algo"])
            except CheckpointError as exc:
                problems.append(f"skipped bad checkpoint: {exc}")
                continue
            except (RuntimeError, KeyError, ValueError) as exc:
                problems.append(
                    f"skipped checkpoint {path.name}: it does not fit this config "
                    f"(algo={self.cfg.algo.name}, task={self.cfg.task.name}): {_first_cause(exc)}"
                )
                self.algo = self._new_algo()  # no half-loaded learner
                continue
            self.notes += problems
            self.iteration, self.env_steps = int(state["iteration"]), int(state["env_steps"])
            set_rng_state(state["rng"])
            self.loop.resumed(path, state)
            return path
        listing = "; ".join(problems) if problems else "no ckpt_*.pt files"
        raise ConfigError(f"resume: no usable checkpoint in {directory}: {listing}")

    def _new_algo(self) -> Algorithm:
        obs = policy_obs_shapes(self.algo_cls, self.shapes)
        return self.algo_cls(self.cfg.algo, obs, self.shapes.action_dim, self.device)

    def save(self) -> Path:
        """Checkpoint the current state (`checkpoints/ckpt_<iteration>.pt`); call it only
        between updates."""
        with self.prof.section("checkpoint"):
            path = save_checkpoint(
                self.run.checkpoints,
                self.iteration,
                {
                    "iteration": self.iteration,
                    "env_steps": self.env_steps,
                    "algo": self.algo.state_dict(),
                    "rng": rng_state(),
                    "config": to_yaml(self.cfg),
                    "metadata_task": self.shapes.metadata["task"],
                    **self.loop.checkpoint_state(),
                },
            )
            self.loop.after_checkpoint()
        self.last_checkpoint = path
        self.call_hooks("on_checkpoint", path)
        return path

    def log(self, row: dict[str, float], step: int | None = None) -> None:
        """Write one row of metrics (metrics.jsonl and TensorBoard, as configured) at `step`
        of the loop's x axis (default: env steps for RL, gradient steps offline)."""
        if self._logger is None:
            self._logger = MetricsLogger(
                self.run.metrics if self.cfg.logging.jsonl else None,
                self.run.tensorboard if self.cfg.logging.tensorboard else None,
                step_key=self.loop.step_key,
            )
        if step is None:
            step = self.env_steps if self.loop.step_key == "env_steps" else self.iteration
        self._logger.log(step, row)

    def call_hooks(self, method: str, *args: Any) -> None:
        """Call `method` of every hook in order, each timed and kept off the RNG streams."""
        for hook in self.hooks:
            with self._hook_section(hook):
                getattr(hook, method)(self, *args)

    # -- the loop ----------------------------------------------------------------------------
    def learn(self) -> RunResult:
        cfg, loop = self.cfg, self.loop
        t_start = time.perf_counter()
        stop = StopSignal()
        restore_signals = install_signal_handlers(stop.set)
        stop_reason = "budget"
        self._note_unhandled()
        try:
            self._lead_world()
            loop.prepare()
            self.call_hooks("on_start")
            with TrainingProgress(
                loop.progress_total,
                f"{cfg.task.name}/{cfg.algo.name}",
                cfg.run.quiet,
                unit=loop.progress_unit,
                metric=loop.progress_metric,
            ) as bar:
                for note in self.notes:
                    bar.print(note)
                stopped_cleanly = False
                try:
                    stop_reason = loop.run(bar, stop)
                    stopped_cleanly = True
                finally:
                    if stopped_cleanly:
                        self.save()
                    else:
                        bar.print(self._kept_checkpoint_note())
                    loop.finish()
                    if self._logger is not None:
                        self._logger.close()
                        self._logger = None
                    restore_signals()
            if stop:
                stop_reason = "signal"
            wall = time.perf_counter() - t_start
            mean_return = loop.mean_return() if isinstance(loop, RolloutLoop) else None
            result = RunResult(
                self.run,
                self.iteration,
                self.env_steps,
                wall,
                mean_return,
                stop_reason,
                exit_code=stop.exit_code if stop else 0,
            )
            result.summary, text = loop.summary(result, wall)
            self._write_summary(result, text)
            self.call_hooks("on_end", result)
            return result
        finally:
            for hook in self.hooks:
                hook.close()
            self.close()

    def _lead_world(self) -> None:
        """Rank 0's side of the start (the followers' is unilab.train.follower): where they
        resume from, then the parameters and the RNG state they start with."""
        world = self.world
        if not world.active:
            return
        world.broadcast_text(str(self.resumed_from or ""))
        world.attach(self.algo)
        world.share_rng()

    def close(self) -> None:
        """Release the run directory (learn() does this when it ends)."""
        self._lock.release()

    def _write_summary(self, result: RunResult, text: str) -> None:
        atomic_write_text(self.run.path / "summary.json", json.dumps(result.summary, indent=2))
        print(text, file=sys.stderr)
        if not self.cfg.run.quiet:
            print(self.prof.report(), file=sys.stderr)
        atomic_write_text(self.run.path / "summary.txt", text + "\n\n" + self.prof.report() + "\n")

    def _kept_checkpoint_note(self) -> str:
        """Said when the loop ends on an exception (or a second Ctrl-C): the learner may be
        mid-update, so no checkpoint is taken of it."""
        kind = sys.exc_info()[0]
        why = kind.__name__ if kind is not None else "an error"
        if self.last_checkpoint is None:
            kept = "no checkpoint was written in this session"
            newest = list_checkpoints(self.run.checkpoints)
            if newest:
                kept += f"; the newest on disk is {newest[-1].name}"
        else:
            kept = f"the last good checkpoint is {self.last_checkpoint.name}"
        return (
            f"training stopped by {why} at iteration {self.iteration}; no checkpoint taken "
            f"of a learner that may be mid-update: {kept}"
        )

    # -- helpers -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _hook_section(self, hook: TrainHook) -> Iterator[None]:
        """Time the hook under its name and keep it off the learner's random streams."""
        torch_state = torch.get_rng_state()
        numpy_state = np.random.get_state()
        python_state = random.getstate()
        try:
            with self.prof.section(hook.name):
                yield
        finally:
            torch.set_rng_state(torch_state)
            np.random.set_state(numpy_state)
            random.setstate(python_state)

    def _note_unhandled(self) -> None:
        """Config keys that ask for a hook nobody attached (e.g. `unilab.train.train` without
        the tool hooks that `unilab.workflows.train` adds)."""
        wanted = []
        if self.cfg.logging.record_store:
            wanted.append("logging.record_store")
        if self.cfg.viz.rerun:
            wanted.append("viz.rerun")
        if self.cfg.run.export:
            wanted.append("run.export")
        handled = {key for hook in self.hooks for key in hook.handles}
        missing = [k for k in wanted if k not in handled]
        if missing:
            self.notes.append(
                f"set but not attached here: {', '.join(missing)} (unilab.workflows.train "
                "attaches the recording, Rerun and export hooks)"
            )


def _first_cause(exc: BaseException) -> str:
    """The telling line of a load_state_dict error (torch lists every mismatch)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for start in ("size mismatch", "Missing key", "Unexpected key"):
        for line in lines:
            if line.startswith(start):
                return line.rstrip(".")
    return lines[-1] if lines else type(exc).__name__
