"""The RL loop of a `Runner`: sim workers → ring buffer → update → publish → hooks.

`run()` starts the sim workers, then loops {next batch, update, publish, hooks, log,
checkpoint} until `run.total_env_steps`, `run.max_wall_s`, SIGINT/SIGTERM or a hook's
`runner.request_stop()`. In sync mode a resumed run restores the workers' saved states at
the checkpoint's iteration, so a resume is bit-exact (unless workers restarted before it).
"""

from __future__ import annotations

import math
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from unilab.config.errors import ConfigError
from unilab.runtime.branching import BranchingError, BranchPlan
from unilab.runtime.fields import FieldSpecs, info_fields
from unilab.runtime.learner_side import Batch, LearnerRuntime
from unilab.runtime.signals import StopSignal
from unilab.runtime.sim_worker import pin_to_core
from unilab.runtime.source import ChunkSource
from unilab.runtime.worker_state import find_state_file, parse_state_file, prune_state_files
from unilab.train.bin_allocation import RolloutAllocation
from unilab.train.hooks import IterationInfo, RunResult
from unilab.train.loops import TrainLoop
from unilab.train.sim_worker import WORKER_TARGET
from unilab.utils.checkpoint import list_checkpoints
from unilab.utils.progress import TrainingProgress

if TYPE_CHECKING:
    from unilab.train.runner import Runner

RETURN_WINDOW = 100
"""Finished training episodes the logged mean return is taken over."""


class RolloutLoop(TrainLoop):
    def __init__(self, runner: Runner, source: ChunkSource | None = None) -> None:
        super().__init__(runner)
        self.source = source
        self.progress_total = runner.cfg.run.total_env_steps
        self.lineage_restarts = 0
        """Worker restarts in this run's history up to the loaded checkpoint."""
        self.restore_iteration: int | None = None
        self.returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self.worker_totals: dict[str, float] = {}
        self.staleness: dict[int, int] = {}
        self.start_steps = 0
        self._allocation: RolloutAllocation | None = None

    def check_inputs(self) -> None:
        shapes = self.runner.shapes  # probed after the loop was made
        cfg = self.runner.cfg
        self._allocation = RolloutAllocation(
            cfg, shapes.reset_bins, shapes.task_metrics, cfg.run.seed
        )
        rt = cfg.runtime
        try:
            BranchPlan.check(rt.branching_k, rt.branching_every, cfg.sim.num_envs // rt.num_workers)
        except BranchingError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def allocation(self) -> RolloutAllocation:
        if self._allocation is None:
            raise RuntimeError("RolloutLoop.check_inputs() has not run (the Runner calls it)")
        return self._allocation

    def learner_threads(self, cpu_count: int) -> int:
        # The learner shares the CPU with the sim workers; small MLP updates gain nothing
        # from more threads and spin-waiting threads steal the workers' cores.
        rt = self.runner.cfg.runtime
        return cpu_count - rt.num_workers * rt.threads_per_worker

    # -- checkpoints --------------------------------------------------------------------
    def resumed(self, path: Path, state: dict[str, Any]) -> None:
        runner = self.runner
        self.lineage_restarts = int(state.get("worker_restarts", 0))
        self.allocation.load_state_dict(state.get("allocation") or {})
        states = runner.run.path / "worker_states"
        # States saved after this checkpoint belong to a future this run abandons.
        prune_state_files(states, above=runner.iteration)
        note = f"resumed from {path.name} at iteration {runner.iteration}"
        cfg = runner.cfg
        if cfg.runtime.mode != "sync":
            runner.notes.append(note + " (async mode: not bit-exact)")
            return
        found = [
            find_state_file(states, w, runner.iteration) for w in range(cfg.runtime.num_workers)
        ]
        missing = [w for w, p in enumerate(found) if p is None]
        if missing:
            runner.notes.append(
                note + f"; no worker state at this iteration for worker(s) {missing}: workers "
                "start fresh, not bit-exact"
            )
            return
        self.restore_iteration = runner.iteration
        respawned = [w for w, p in enumerate(found) if p is not None and _generation(p) > 0]
        if self.lineage_restarts or respawned:
            runner.notes.append(
                note + f" with worker states; not bit-exact: {self.lineage_restarts} worker "
                "restart(s) happened before this checkpoint, so results differ from an "
                "uninterrupted run"
            )
        else:
            runner.notes.append(note + " with worker states (bit-exact)")

    def restarts(self) -> int:
        """Worker restarts in this run's history so far (checkpoints carry the count)."""
        runtime = self.runner.runtime
        here = runtime.supervisor_stats().get("restarts", 0) if runtime else 0
        return self.lineage_restarts + int(here)

    def checkpoint_state(self) -> dict[str, Any]:
        return {"worker_restarts": self.restarts(), "allocation": self.allocation.state_dict()}

    def after_checkpoint(self) -> None:
        """Worker states of pruned checkpoints are deleted with them."""
        runner = self.runner
        kept = [int(p.stem.split("_")[1]) for p in list_checkpoints(runner.run.checkpoints)]
        if kept:
            prune_state_files(runner.run.path / "worker_states", below=min(kept))

    # -- the loop -----------------------------------------------------------------------
    def chunk_fields(self, with_info: bool = True) -> FieldSpecs:
        """The fields each chunk carries: the algorithm's, plus reward terms and task metrics."""
        shapes = self.runner.shapes
        fields = self.runner.algo_cls.rollout_fields(self.runner.cfg.algo, shapes)
        if with_info:
            branching = self.runner.cfg.runtime.branching_k > 1
            fields.update(
                info_fields(shapes.reward_terms, shapes.task_metrics, shapes.reset_bins, branching)
            )
        return fields

    def prepare(self) -> None:
        runner = self.runner
        cfg = runner.cfg
        from unilab.config.compose import to_yaml

        runner.runtime = LearnerRuntime(
            cfg,
            to_yaml(cfg),
            self.chunk_fields(),
            self.allocation.num_floats(runner.algo.actor),
            runner.device,
            state_dir=runner.run.path / "worker_states",
            save_state_every=cfg.run.checkpoint_every,
            restore_iteration=self.restore_iteration,
            iteration_offset=runner.iteration,
            worker_target=WORKER_TARGET,
            source=self.source if self.source is not None else self._backend_source(),
        )

    def _backend_source(self) -> ChunkSource | None:
        """The chunk source `runtime.backend` asks for (None: the local ring)."""
        runner = self.runner
        if runner.cfg.runtime.backend != "ray":
            return None
        from unilab.config.compose import to_yaml
        from unilab.train.ray_backend import ray_source

        return ray_source(
            runner.cfg,
            to_yaml(runner.cfg),
            self.chunk_fields(),
            self.allocation.num_floats(runner.algo.actor),
        )

    def run(self, bar: TrainingProgress, stop: StopSignal) -> str:
        runner = self.runner
        cfg, prof, runtime = runner.cfg, runner.prof, runner.runtime
        assert runtime is not None
        if cfg.runtime.pin_cpus:
            pin_to_core(runtime.cores, -1)  # workers: cores 0..W-1
        self.start_steps, t_start = runner.env_steps, time.perf_counter()
        runtime.start()
        runtime.publish(self.allocation.weights(runner.algo.actor))
        world = runner.world
        while True:
            elapsed = time.perf_counter() - t_start
            go_on = runner.env_steps < cfg.run.total_env_steps and not stop
            late = bool(cfg.run.max_wall_s and elapsed > cfg.run.max_wall_s)
            asked = runner.stop_requested is not None
            # one vote per iteration: all learner ranks go on or all stop
            if not world.agree(go_on and not late and not asked):
                if asked:
                    return "stopped"
                if late:
                    return "wall_time"
                return "peer_stopped" if go_on else "budget"
            with prof.section("learner_wait"):
                batch = runtime.next_batch()
            for event in batch.events:
                bar.print(f"worker {event.worker_id} {event.kind}; restarted={event.restarted}")
            with prof.section("update"):
                metrics = runner.algo.update(batch.tensors)
            with prof.section("publish"):
                runtime.publish(self.allocation.weights(runner.algo.actor))
            alloc_row: dict[str, float] = {}
            if self.allocation.tail:  # the task has reset bins
                with prof.section("allocation"):
                    alloc_row = self.allocation.learn(runtime.host_batch)
            runner.iteration += 1
            runner.env_steps += batch.env_steps * world.size
            episode = runtime.host_batch["episode_return"]
            self.returns.extend(episode[np.isfinite(episode)].tolist())
            mean_return = self.mean_return()
            elapsed = time.perf_counter() - t_start
            sps = (runner.env_steps - self.start_steps) / max(elapsed, 1e-9)
            bar.update(runner.env_steps, sps, mean_return)
            info = IterationInfo(
                runner.iteration, runner.env_steps, batch, runtime.host_batch, metrics, mean_return
            )
            runner.call_hooks("on_iteration", info)
            row: dict[str, float] = {}
            if runner.iteration % cfg.logging.log_every == 0:
                row = self._row(batch, metrics, mean_return, sps, elapsed) | alloc_row
            row.update(info.log)
            if row:
                runner.log(row)
            if runner.iteration % cfg.run.checkpoint_every == 0:
                runner.save()
        return "budget"

    def mean_return(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None

    def finish(self) -> None:
        runtime = self.runner.runtime
        if runtime is None:
            return
        self.worker_totals = runtime.stats.totals()
        self.staleness = dict(sorted(runtime.staleness_hist.items()))
        runtime.close()

    def _row(
        self,
        batch: Batch,
        metrics: dict[str, float],
        mean_return: float | None,
        sps: float,
        elapsed: float,
    ) -> dict[str, float]:
        runner = self.runner
        runtime = runner.runtime
        assert runtime is not None
        totals = runner.prof.totals
        row = {f"algo/{k}": v for k, v in metrics.items()}
        row["train/mean_return"] = mean_return if mean_return is not None else math.nan
        row["train/steps_per_s"] = sps
        row["train/iteration"] = runner.iteration
        row["train/wall_s"] = elapsed
        row["runtime/staleness_mean"] = float(np.mean(batch.staleness))
        row["runtime/dropped_stale_total"] = runtime.counts["dropped_stale"]
        row["runtime/learner_wait_s"] = totals.get("learner_wait", 0.0)
        row["runtime/update_s"] = totals.get("update", 0.0)
        row["runtime/publish_s"] = totals.get("publish", 0.0)
        row["runtime/allocation_s"] = totals.get("allocation", 0.0)
        shapes = runner.shapes
        row.update(info_means(runtime.host_batch, shapes.reward_terms, shapes.task_metrics))
        row.update({f"workers/{k}": v for k, v in runtime.stats.totals().items()})
        row.update({f"supervisor/{k}": v for k, v in runtime.supervisor_stats().items()})
        return row

    def summary(self, result: RunResult, wall: float) -> tuple[dict[str, Any], str]:
        runtime = self.runner.runtime
        assert runtime is not None
        prof, totals, staleness = self.runner.prof, self.worker_totals, self.staleness
        sim_busy = totals["sim_s"] + totals["render_s"] + totals["inference_s"] + totals["write_s"]
        sim_idle = 100.0 * totals["wait_s"] / max(sim_busy + totals["wait_s"], 1e-9)
        learner_idle = 100.0 * prof.totals.get("learner_wait", 0.0) / max(wall, 1e-9)
        mean = result.mean_return
        text = (
            f"done: {result.iterations} iterations, {result.env_steps:,} env steps in {wall:.1f} s "
            f"({(result.env_steps - self.start_steps) / max(wall, 1e-9):,.0f} steps/s); "
            f"mean return {mean if mean is not None else float('nan'):.3f}; "
            f"sim idle {sim_idle:.0f} %, learner idle {learner_idle:.0f} %; "
            f"staleness {staleness}; unstable envs reset {int(totals['sim_unstable'])}\n"
            + time_split(totals, prof.totals)
        )
        summary = {
            "iterations": result.iterations,
            "env_steps": result.env_steps,
            "wall_s": wall,
            "mean_return": mean,
            "stop_reason": result.stop_reason,
            "sim_idle_pct": sim_idle,
            "learner_idle_pct": learner_idle,
            "staleness_hist": {str(k): v for k, v in staleness.items()},
            "dropped_stale": runtime.counts["dropped_stale"],
            "workers": totals,
            "supervisor": runtime.supervisor_stats(),
            "profile_s": prof.snapshot(),
        }
        return summary, text


def time_split(workers: dict[str, float], learner: dict[str, float]) -> str:
    """One line of where the time went: the workers' summed seconds (render, sim without
    rendering, policy inference, ring writes, waiting) and the learner's (update, waiting
    for data, evaluation)."""
    parts = [
        f"{name} {workers.get(key, 0.0):.1f}"
        for name, key in (
            ("render", "render_s"),
            ("sim", "sim_s"),
            ("inference", "inference_s"),
            ("write", "write_s"),
            ("wait", "wait_s"),
        )
    ]
    own = [
        f"{name} {learner.get(key, 0.0):.1f}"
        for name, key in (("update", "update"), ("wait", "learner_wait"), ("eval", "eval"))
    ]
    return f"time split (s): workers {', '.join(parts)}; learner {', '.join(own)}"


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
