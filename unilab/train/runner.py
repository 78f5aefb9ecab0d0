"""The learner process's loop as a `Runner`: build, `learn()`, `save()`, `load()`, `log()`.

    runner = Runner(cfg, hooks=[EvalHook(every=10)])   # run dir, probe, algorithm (+ resume)
    result = runner.learn()                            # runtime, loop, final checkpoint, summary

Building composes the run: seeds, the run directory, a one-env probe of the task for its
shapes, the algorithm, and (with `run.resume`) the newest good checkpoint. `learn()` starts
the sim workers, then loops {next batch, update, publish, hooks, log, checkpoint} until the
step or wall-time budget or SIGINT/SIGTERM, writes a final checkpoint and the summary, and
calls the hooks' `on_end`. Recording, Rerun, mid-run evaluation, export and play are hooks
(`unilab.train.hooks`); `unilab.workflows.train` attaches the standard ones for `unilab train`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.algos.base import Algorithm
from unilab.algos.build import build_policy
from unilab.algos.registry import ALGORITHMS
from unilab.config.compose import to_yaml
from unilab.config.errors import ConfigError
from unilab.config.schema import Config
from unilab.runtime.fields import FieldSpecs, info_fields
from unilab.runtime.flat_weights import actor_to_flat
from unilab.runtime.learner_side import Batch, LearnerRuntime
from unilab.runtime.signals import StopSignal, install_signal_handlers
from unilab.runtime.sim_worker import pin_to_core
from unilab.runtime.source import ChunkSource
from unilab.runtime.torch_policy import PolicyModule
from unilab.runtime.worker_state import find_state_file, parse_state_file, prune_state_files
from unilab.train.distributed import SINGLE_WORLD, World
from unilab.train.hooks import IterationInfo, RunResult, TrainHook
from unilab.train.run_dir import RunDir, open_run_dir
from unilab.train.run_lock import RunLock
from unilab.train.sim_worker import WORKER_TARGET
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

RETURN_WINDOW = 100
"""Finished training episodes the logged mean return is taken over."""


@dataclass(frozen=True)
class TaskShapes:
    """What the learner needs to know about the task, from a one-env probe."""

    obs_dims: dict[str, int]
    action_dim: int
    metadata: dict[str, Any]
    reward_terms: list[str]
    """Reward term names in sorted order (the `reward_terms` field's columns)."""
    task_metrics: list[str]
    """Task metric names in sorted order (the `task_metrics` field's columns)."""


def probe_task(cfg: Config) -> TaskShapes:
    """Build the task with one env to learn its shapes (a bad task config: ConfigError)."""
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
    )


class Runner:
    def __init__(
        self,
        cfg: Config,
        hooks: Iterable[TrainHook] = (),
        *,
        source: ChunkSource | None = None,
        world: World = SINGLE_WORLD,
    ) -> None:
        self.cfg = cfg
        self.hooks: list[TrainHook] = list(hooks)
        self._source = source
        self.world = world
        """Learner processes (torchrun); this Runner is rank 0 (unilab.train.distributed)."""
        try:
            self.device = world.device if world.active else select_device(cfg.device)
        except DeviceError as exc:
            raise ConfigError(str(exc)) from None
        if self.device.type == "cpu":
            # The learner shares the CPU with the sim workers; small MLP updates gain nothing
            # from more threads and spin-waiting threads steal the workers' cores.
            spare = (os.cpu_count() or 1) - cfg.runtime.num_workers * cfg.runtime.threads_per_worker
            torch.set_num_threads(max(1, spare))
        torch.manual_seed(cfg.run.seed)
        np.random.seed(cfg.run.seed % 2**32)
        random.seed(cfg.run.seed)
        self.shapes = probe_task(cfg)
        self.algo_cls: type[Algorithm] = ALGORITHMS.get(cfg.algo.name).algo_cls
        if getattr(self.algo_cls, "offline", False):
            raise ConfigError(
                f"algo={cfg.algo.name} learns offline from an episode store; the Runner "
                "trains from rollouts only (offline training: unilab.algos.offline.train_offline)"
            )
        if world.active and not self.algo_cls.supports_data_parallel:
            raise ConfigError(world.unsupported(cfg.algo.name))
        self.algo: Algorithm = self._new_algo()
        self.iteration = 0
        self.env_steps = 0
        self._lineage_restarts = 0
        """Worker restarts in this run's history up to the loaded checkpoint."""
        self._restore_iteration: int | None = None
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
        self.runtime: LearnerRuntime | None = None
        self.last_checkpoint: Path | None = None
        """The newest checkpoint this Runner wrote."""
        self.prof = Profiler()
        self._logger: MetricsLogger | None = None

    # -- the pieces --------------------------------------------------------------------------
    @property
    def policy(self) -> PolicyModule:
        """The learner's actor (on the learner device): what is published and exported."""
        return self.algo.actor

    def cpu_policy(self) -> PolicyModule:
        """A CPU copy of the current policy (for rollouts in this process)."""
        return build_policy(self.cfg.algo, self.shapes, weights=self.algo.actor)

    def chunk_fields(self, with_info: bool = True) -> FieldSpecs:
        """The fields each chunk carries: the algorithm's, plus reward terms and task metrics."""
        fields = self.algo_cls.chunk_fields(self.shapes.obs_dims, self.shapes.action_dim)
        if with_info:
            fields.update(info_fields(self.shapes.reward_terms, self.shapes.task_metrics))
        return fields

    def add_hook(self, hook: TrainHook) -> None:
        self.hooks.append(hook)

    def load(self, directory: Path | None = None) -> Path:
        """Continue from the newest checkpoint in `directory` (default: this run's) that
        reads and fits this config: algorithm state, counters, RNG states, and (sync mode)
        the workers' states saved at that iteration. A checkpoint that is unreadable or whose
        shapes do not fit is named and the one before it is tried; none: a ConfigError."""
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
            self._resume_from(path, state)
            return path
        listing = "; ".join(problems) if problems else "no ckpt_*.pt files"
        raise ConfigError(f"resume: no usable checkpoint in {directory}: {listing}")

    def _resume_from(self, path: Path, state: dict[str, Any]) -> None:
        self.iteration, self.env_steps = int(state["iteration"]), int(state["env_steps"])
        set_rng_state(state["rng"])
        self._lineage_restarts = int(state.get("worker_restarts", 0))
        states = self.run.path / "worker_states"
        # States saved after this checkpoint belong to a future this run abandons.
        prune_state_files(states, above=self.iteration)
        note = f"resumed from {path.name} at iteration {self.iteration}"
        if self.cfg.runtime.mode != "sync":
            self.notes.append(note + " (async mode: not bit-exact)")
            return
        found = [
            find_state_file(states, w, self.iteration) for w in range(self.cfg.runtime.num_workers)
        ]
        missing = [w for w, p in enumerate(found) if p is None]
        if missing:
            self.notes.append(
                note + f"; no worker state at this iteration for worker(s) {missing}: workers "
                "start fresh, not bit-exact"
            )
            return
        self._restore_iteration = self.iteration
        respawned = [w for w, p in enumerate(found) if p is not None and _generation(p) > 0]
        if self._lineage_restarts or respawned:
            self.notes.append(
                note + f" with worker states; not bit-exact: {self._lineage_restarts} worker "
                "restart(s) happened before this checkpoint, so results differ from an "
                "uninterrupted run"
            )
        else:
            self.notes.append(note + " with worker states (bit-exact)")

    def _new_algo(self) -> Algorithm:
        return self.algo_cls(
            self.cfg.algo, self.shapes.obs_dims, self.shapes.action_dim, self.device
        )

    def _restarts(self) -> int:
        """Worker restarts in this run's history so far (checkpoints carry the count)."""
        here = self.runtime.supervisor_stats().get("restarts", 0) if self.runtime else 0
        return self._lineage_restarts + int(here)

    def save(self) -> Path:
        """Checkpoint the current state (`checkpoints/ckpt_<iteration>.pt`); call it only
        between updates. Worker states of pruned checkpoints are deleted with them."""
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
                    "worker_restarts": self._restarts(),
                },
            )
            kept = [int(p.stem.split("_")[1]) for p in list_checkpoints(self.run.checkpoints)]
            states = self.run.path / "worker_states"
            if kept:
                prune_state_files(states, below=min(kept))
        self.last_checkpoint = path
        for hook in self.hooks:
            with self._hook_section(hook):
                hook.on_checkpoint(self, path)
        return path

    def log(self, row: dict[str, float], env_steps: int | None = None) -> None:
        """Write one row of metrics (metrics.jsonl and TensorBoard, as configured)."""
        if self._logger is None:
            self._logger = MetricsLogger(
                self.run.metrics if self.cfg.logging.jsonl else None,
                self.run.tensorboard if self.cfg.logging.tensorboard else None,
            )
        self._logger.log(self.env_steps if env_steps is None else env_steps, row)

    def build_runtime(self) -> LearnerRuntime:
        cfg = self.cfg
        self.runtime = LearnerRuntime(
            cfg,
            to_yaml(cfg),
            self.chunk_fields(),
            actor_to_flat(self.algo.actor).size,
            self.device,
            state_dir=self.run.path / "worker_states",
            save_state_every=cfg.run.checkpoint_every,
            restore_iteration=self._restore_iteration,
            iteration_offset=self.iteration,
            worker_target=WORKER_TARGET,
            source=self._source if self._source is not None else self._backend_source(),
        )
        return self.runtime

    def _backend_source(self) -> ChunkSource | None:
        """The chunk source `runtime.backend` asks for (None: the local ring)."""
        if self.cfg.runtime.backend != "ray":
            return None
        from unilab.train.ray_backend import ray_source

        return ray_source(
            self.cfg, to_yaml(self.cfg), self.chunk_fields(), actor_to_flat(self.algo.actor).size
        )

    # -- the loop ----------------------------------------------------------------------------
    def learn(self) -> RunResult:
        cfg = self.cfg
        self._lead_world()
        runtime = self.build_runtime()
        prof = self.prof
        returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        start_steps, t_start = self.env_steps, time.perf_counter()
        stop = StopSignal()
        restore_signals = install_signal_handlers(stop.set)
        stop_reason = "budget"
        self._note_unhandled()
        try:
            for hook in self.hooks:
                with self._hook_section(hook):
                    hook.on_start(self)
            if cfg.runtime.pin_cpus:
                pin_to_core(runtime.cores, -1)  # workers: cores 0..W-1
            with TrainingProgress(
                cfg.run.total_env_steps, f"{cfg.task.name}/{cfg.algo.name}", cfg.run.quiet
            ) as bar:
                for note in self.notes:
                    bar.print(note)
                runtime.start()
                stopped_cleanly = False
                try:
                    runtime.publish(actor_to_flat(self.algo.actor))
                    while True:
                        elapsed = time.perf_counter() - t_start
                        go_on = self.env_steps < cfg.run.total_env_steps and not stop
                        late = bool(cfg.run.max_wall_s and elapsed > cfg.run.max_wall_s)
                        # one vote per iteration: all learner ranks go on or all stop
                        if not self.world.agree(go_on and not late):
                            if late:
                                stop_reason = "wall_time"
                            elif go_on:
                                stop_reason = "peer_stopped"
                            break
                        with prof.section("learner_wait"):
                            batch = runtime.next_batch()
                        for event in batch.events:
                            bar.print(
                                f"worker {event.worker_id} {event.kind}; restarted={event.restarted}"
                            )
                        with prof.section("update"):
                            metrics = self.algo.update(batch.tensors)
                        with prof.section("publish"):
                            runtime.publish(actor_to_flat(self.algo.actor))
                        self.iteration += 1
                        self.env_steps += batch.env_steps * self.world.size
                        episode = runtime.host_batch["episode_return"]
                        returns.extend(episode[np.isfinite(episode)].tolist())
                        mean_return = float(np.mean(returns)) if returns else None
                        elapsed = time.perf_counter() - t_start
                        sps = (self.env_steps - start_steps) / max(elapsed, 1e-9)
                        bar.update(self.env_steps, sps, mean_return)
                        info = IterationInfo(
                            self.iteration,
                            self.env_steps,
                            batch,
                            runtime.host_batch,
                            metrics,
                            mean_return,
                        )
                        for hook in self.hooks:
                            with self._hook_section(hook):
                                hook.on_iteration(self, info)
                        row: dict[str, float] = {}
                        if self.iteration % cfg.logging.log_every == 0:
                            row = self._row(batch, metrics, mean_return, sps, elapsed)
                        row.update(info.log)
                        if row:
                            self.log(row)
                        if self.iteration % cfg.run.checkpoint_every == 0:
                            self.save()
                    stopped_cleanly = True
                finally:
                    if stopped_cleanly:
                        self.save()
                    else:
                        bar.print(self._kept_checkpoint_note())
                    worker_totals = runtime.stats.totals()
                    staleness = dict(sorted(runtime.staleness_hist.items()))
                    runtime.close()
                    if self._logger is not None:
                        self._logger.close()
                        self._logger = None
                    restore_signals()
            if stop:
                stop_reason = "signal"
            wall = time.perf_counter() - t_start
            result = RunResult(
                self.run,
                self.iteration,
                self.env_steps,
                wall,
                float(np.mean(returns)) if returns else None,
                stop_reason,
                exit_code=stop.exit_code if stop else 0,
            )
            self._write_summary(result, worker_totals, staleness, start_steps)
            for hook in self.hooks:
                with self._hook_section(hook):
                    hook.on_end(self, result)
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

    def _row(
        self,
        batch: Batch,
        metrics: dict[str, float],
        mean_return: float | None,
        sps: float,
        elapsed: float,
    ) -> dict[str, float]:
        runtime = self.runtime
        assert runtime is not None
        totals = self.prof.totals
        row = {f"algo/{k}": v for k, v in metrics.items()}
        row["train/mean_return"] = mean_return if mean_return is not None else math.nan
        row["train/steps_per_s"] = sps
        row["train/iteration"] = self.iteration
        row["train/wall_s"] = elapsed
        row["runtime/staleness_mean"] = float(np.mean(batch.staleness))
        row["runtime/dropped_stale_total"] = runtime.counts["dropped_stale"]
        row["runtime/learner_wait_s"] = totals.get("learner_wait", 0.0)
        row["runtime/update_s"] = totals.get("update", 0.0)
        row["runtime/publish_s"] = totals.get("publish", 0.0)
        row.update(
            info_means(runtime.host_batch, self.shapes.reward_terms, self.shapes.task_metrics)
        )
        row.update({f"workers/{k}": v for k, v in runtime.stats.totals().items()})
        row.update({f"supervisor/{k}": v for k, v in runtime.supervisor_stats().items()})
        return row

    def _write_summary(
        self,
        result: RunResult,
        worker_totals: dict[str, float],
        staleness: dict[int, int],
        start_steps: int,
    ) -> None:
        runtime = self.runtime
        assert runtime is not None
        prof, wall = self.prof, result.wall_s
        sim_busy = worker_totals["sim_s"] + worker_totals["inference_s"] + worker_totals["write_s"]
        sim_idle = 100.0 * worker_totals["wait_s"] / max(sim_busy + worker_totals["wait_s"], 1e-9)
        learner_idle = 100.0 * prof.totals.get("learner_wait", 0.0) / max(wall, 1e-9)
        mean = result.mean_return
        text = (
            f"done: {result.iterations} iterations, {result.env_steps:,} env steps in {wall:.1f} s "
            f"({(result.env_steps - start_steps) / max(wall, 1e-9):,.0f} steps/s); "
            f"mean return {mean if mean is not None else float('nan'):.3f}; "
            f"sim idle {sim_idle:.0f} %, learner idle {learner_idle:.0f} %; "
            f"staleness {staleness}; unstable envs reset {int(worker_totals['sim_unstable'])}"
        )
        result.summary = {
            "iterations": result.iterations,
            "env_steps": result.env_steps,
            "wall_s": wall,
            "mean_return": mean,
            "stop_reason": result.stop_reason,
            "sim_idle_pct": sim_idle,
            "learner_idle_pct": learner_idle,
            "staleness_hist": {str(k): v for k, v in staleness.items()},
            "dropped_stale": runtime.counts["dropped_stale"],
            "workers": worker_totals,
            "supervisor": runtime.supervisor_stats(),
            "profile_s": prof.snapshot(),
        }
        atomic_write_text(self.run.path / "summary.json", json.dumps(result.summary, indent=2))
        print(text, file=sys.stderr)
        if not self.cfg.run.quiet:
            print(prof.report(), file=sys.stderr)
        atomic_write_text(self.run.path / "summary.txt", text + "\n\n" + prof.report() + "\n")


def info_means(
    host_batch: dict[str, np.ndarray], terms: list[str], metrics: list[str]
) -> dict[str, float]:
    """Batch means of each reward term (per step) and task metric, for logging."""
    out: dict[str, float] = {}
    for field_name, names, prefix in (
        ("reward_terms", terms, "reward/"),
        ("task_metrics", metrics, "task/"),
    ):
        if field_name in host_batch and names:
            means = host_batch[field_name].reshape(-1, len(names)).mean(axis=0)
            out.update({prefix + n: float(m) for n, m in zip(names, means, strict=True)})
    return out


def _generation(path: Path) -> int:
    parsed = parse_state_file(path)
    return parsed[2] if parsed is not None else 0


def _first_cause(exc: BaseException) -> str:
    """The telling line of a load_state_dict error (torch lists every mismatch)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for start in ("size mismatch", "Missing key", "Unexpected key"):
        for line in lines:
            if line.startswith(start):
                return line.rstrip(".")
    return lines[-1] if lines else type(exc).__name__
