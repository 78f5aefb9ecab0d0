"""`unilab train`: the learner process's loop.

Compose → run directory → probe the task for its shapes → build the algorithm (and resume
it) → start the runtime → publish weights → loop {next batch, update, publish, log,
checkpoint} until the step or time budget, or SIGINT/SIGTERM → final checkpoint, export,
summary.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch

from unilab.algos.base import actor_to_flat, info_fields
from unilab.algos.registry import ALGORITHMS
from unilab.config.compose import to_yaml
from unilab.config.schema import Config
from unilab.runtime.learner_side import LearnerRuntime
from unilab.runtime.signals import StopSignal, install_signal_handlers
from unilab.runtime.worker_state import state_file
from unilab.tasks.registry import make_task
from unilab.train.checkpoint import (
    load_latest_good,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from unilab.utils.device import describe, select_device
from unilab.utils.metrics import MetricsLogger
from unilab.utils.profiler import Profiler
from unilab.utils.progress import TrainingProgress
from unilab.utils.run_dir import RunDir, new_run_dir

log = logging.getLogger("unilab.train")


def train(cfg: Config) -> RunDir:
    import unilab.algos
    import unilab.tasks  # noqa: F401  (registers everything)

    device = select_device(cfg.device)
    if device.type == "cpu":
        # The learner shares the CPU with the sim workers; small MLP updates gain nothing
        # from more threads and spin-waiting threads steal the workers' cores.
        import os

        spare = (os.cpu_count() or 1) - cfg.runtime.num_workers * cfg.runtime.threads_per_worker
        torch.set_num_threads(max(1, spare))
    run = new_run_dir(cfg)
    torch.manual_seed(cfg.run.seed)
    np.random.seed(cfg.run.seed % 2**32)
    random.seed(cfg.run.seed)

    probe = make_task(cfg.task, num_envs=1, seed=cfg.run.seed, sim_cfg=cfg.sim)
    obs_dims, action_dim = probe.obs_dims, probe.action_dim
    metadata = probe.metadata()
    probe.reset()
    term_names, metric_names = sorted(probe.reward_weights), sorted(probe.task_metrics())
    del probe
    entry = ALGORITHMS.get(cfg.algo.name)
    algo = entry.algo_cls(cfg.algo, obs_dims, action_dim, device)

    iteration, env_steps, restore_chunk = 0, 0, None
    sync = cfg.runtime.mode == "sync"
    notes: list[str] = [f"device: {describe(device)}", f"run directory: {run.path}"]
    if cfg.run.resume:
        path, state, skipped = load_latest_good(run.checkpoints, map_location=device)
        notes += [f"skipped bad checkpoint: {s}" for s in skipped]
        algo.load_state_dict(state["algo"])
        iteration, env_steps = int(state["iteration"]), int(state["env_steps"])
        set_rng_state(state["rng"])
        states = run.path / "worker_states"
        if sync and all(
            state_file(states, w, iteration).is_file() for w in range(cfg.runtime.num_workers)
        ):
            restore_chunk = iteration
        notes.append(
            f"resumed from {path.name} at iteration {iteration}"
            + (" with worker states (bit-exact)" if restore_chunk is not None else "")
        )

    flat = actor_to_flat(algo.actor)
    runtime = LearnerRuntime(
        cfg,
        to_yaml(cfg),
        {
            **entry.algo_cls.chunk_fields(obs_dims, action_dim),
            **info_fields(term_names, metric_names),
        },
        flat.size,
        device,
        state_dir=run.path / "worker_states",
        save_state_every=cfg.run.checkpoint_every,
        restore_chunk=restore_chunk,
    )
    recorder = None
    if cfg.logging.record_store:
        from unilab.data.recorder import ChunkRecorder

        recorder = ChunkRecorder(
            cfg.logging.record_store,
            entry.algo_cls.chunk_fields(obs_dims, action_dim),
            num_envs=runtime.envs_per_worker * cfg.runtime.num_workers,
            envs_per_block=runtime.envs_per_worker,
            fps=1.0 / metadata["control_dt"],
            every_n_batches=cfg.logging.record_every,
            max_envs=cfg.logging.record_max_envs,
            meta={"task": cfg.task.name, "robot": metadata["robot"], "seed": cfg.run.seed},
        )
        notes.append(f"recording episodes to {cfg.logging.record_store}")
    viz_recorder = None
    if cfg.viz.rerun:
        from unilab.viz.training_recorder import TrainingRecorder

        viz_recorder = TrainingRecorder(
            cfg, run.media, every=cfg.viz.every, steps=cfg.viz.steps, num_envs=cfg.viz.num_envs
        )
    if cfg.runtime.pin_cpus:
        from unilab.runtime.sim_worker import pin_to_core

        pin_to_core(runtime.supervisor.config["cores"], -1)  # workers take cores 0..W-1
    logger = MetricsLogger(
        run.metrics if cfg.logging.jsonl else None,
        run.tensorboard if cfg.logging.tensorboard else None,
    )
    prof = Profiler()
    stop = StopSignal()
    restore_signals = install_signal_handlers(stop.set)
    returns: deque[float] = deque(maxlen=100)
    start_steps, t_start = env_steps, time.perf_counter()
    events_total = 0

    def checkpoint() -> Path:
        with prof.section("checkpoint"):
            return save_checkpoint(
                run.checkpoints,
                iteration,
                {
                    "iteration": iteration,
                    "env_steps": env_steps,
                    "algo": algo.state_dict(),
                    "rng": rng_state(),
                    "config": to_yaml(cfg),
                    "metadata_task": metadata["task"],
                },
            )

    with TrainingProgress(
        cfg.run.total_env_steps, f"{cfg.task.name}/{cfg.algo.name}", cfg.run.quiet
    ) as bar:
        for note in notes:
            bar.print(note)
        runtime.start()
        try:
            runtime.publish(flat)
            while env_steps < cfg.run.total_env_steps and not stop:
                if cfg.run.max_wall_s and time.perf_counter() - t_start > cfg.run.max_wall_s:
                    break
                with prof.section("learner_wait"):
                    batch = runtime.next_batch()
                if recorder is not None:
                    with prof.section("record"):
                        recorder.record(
                            runtime._staging_np,
                            batch.policy_versions,
                            continuous=not batch.events and batch.dropped_stale == 0,
                        )
                for event in batch.events:
                    events_total += 1
                    bar.print(f"worker {event.worker_id} {event.kind}; restarted={event.restarted}")
                with prof.section("update"):
                    metrics = algo.update(batch.tensors)
                with prof.section("publish"):
                    runtime.publish(actor_to_flat(algo.actor))
                iteration += 1
                env_steps += batch.env_steps
                if viz_recorder is not None:
                    with prof.section("viz"):
                        viz_recorder.maybe_record(iteration, algo.actor)
                ep = runtime._staging_np["episode_return"]
                returns.extend(ep[np.isfinite(ep)].tolist())
                mean_return = float(np.mean(returns)) if returns else None
                elapsed = time.perf_counter() - t_start
                sps = (env_steps - start_steps) / max(elapsed, 1e-9)
                bar.update(env_steps, sps, mean_return)
                if iteration % cfg.logging.log_every == 0:
                    row = {f"algo/{k}": v for k, v in metrics.items()}
                    row["train/mean_return"] = mean_return if mean_return is not None else math.nan
                    row["train/steps_per_s"] = sps
                    row["train/iteration"] = iteration
                    row["train/wall_s"] = elapsed
                    row["runtime/staleness_mean"] = float(np.mean(batch.staleness))
                    row["runtime/dropped_stale_total"] = runtime.counts["dropped_stale"]
                    row["runtime/learner_wait_s"] = prof.totals.get("learner_wait", 0.0)
                    row["runtime/update_s"] = prof.totals.get("update", 0.0)
                    row["runtime/publish_s"] = prof.totals.get("publish", 0.0)
                    row.update(_info_means(runtime._staging_np, term_names, metric_names))
                    row.update({f"workers/{k}": v for k, v in runtime.stats.totals().items()})
                    row.update(
                        {f"supervisor/{k}": v for k, v in runtime.supervisor.stats().items()}
                    )
                    logger.log(env_steps, row)
                if iteration % cfg.run.checkpoint_every == 0:
                    checkpoint()
        finally:
            checkpoint()
            worker_totals = runtime.stats.totals()
            staleness = dict(sorted(runtime.staleness_hist.items()))
            runtime.close()
            logger.close()
            restore_signals()
            if recorder is not None:
                recorder.close()

    wall = time.perf_counter() - t_start
    sim_busy = worker_totals["sim_s"] + worker_totals["inference_s"] + worker_totals["write_s"]
    sim_idle = 100.0 * worker_totals["wait_s"] / max(sim_busy + worker_totals["wait_s"], 1e-9)
    learner_idle = 100.0 * prof.totals.get("learner_wait", 0.0) / max(wall, 1e-9)
    summary = (
        f"done: {iteration} iterations, {env_steps:,} env steps in {wall:.1f} s "
        f"({(env_steps - start_steps) / max(wall, 1e-9):,.0f} steps/s); "
        f"mean return {np.mean(returns) if returns else float('nan'):.3f}; "
        f"sim idle {sim_idle:.0f} %, learner idle {learner_idle:.0f} %; "
        f"staleness {staleness}; unstable envs reset {int(worker_totals['sim_unstable'])}"
    )
    (run.path / "summary.json").write_text(
        json.dumps(
            {
                "iterations": iteration,
                "env_steps": env_steps,
                "wall_s": wall,
                "mean_return": float(np.mean(returns)) if returns else None,
                "sim_idle_pct": sim_idle,
                "learner_idle_pct": learner_idle,
                "staleness_hist": {str(k): v for k, v in staleness.items()},
                "dropped_stale": runtime.counts["dropped_stale"],
                "workers": worker_totals,
                "supervisor": runtime.supervisor.stats(),
                "profile_s": prof.snapshot(),
            },
            indent=2,
        )
    )
    print(summary, file=sys.stderr)
    if not cfg.run.quiet:
        print(prof.report(), file=sys.stderr)
    (run.path / "summary.txt").write_text(summary + "\n\n" + prof.report() + "\n")
    failed = _finish_outputs(cfg, run)
    if stop:
        raise SystemExit(stop.exit_code)
    if failed:
        raise SystemExit(1)
    return run


def _finish_outputs(cfg: Config, run: RunDir) -> bool:
    """Export the policy and play it into media/; report problems without losing the run."""
    if not cfg.run.export:
        return False
    from unilab.export.run_export import export_run

    try:
        paths = export_run(run.path)
        print(f"exported: {paths['onnx']} and {paths['torchscript']}", file=sys.stderr)
        if cfg.run.play_episodes > 0:
            from unilab.deploy.play import play_run

            media = play_run(run.path, episodes=cfg.run.play_episodes, video=True, max_steps=500)
            for note in media.notes:
                print(note, file=sys.stderr)
            shown = [str(p) for p in (media.video, media.rrd) if p is not None]
            print(f"media: {', '.join(shown)}", file=sys.stderr)
    except Exception as exc:  # the checkpoint is safe; say what failed and exit non-zero
        print(f"export/play failed ({type(exc).__name__}): {exc}", file=sys.stderr)
        return True
    return False


def _info_means(
    staging: dict[str, np.ndarray], terms: list[str], metrics: list[str]
) -> dict[str, float]:
    """Batch means of each reward term (per step) and task metric, for logging."""
    out: dict[str, float] = {}
    for field, names, prefix in (
        ("reward_terms", terms, "reward/"),
        ("task_metrics", metrics, "task/"),
    ):
        if field in staging and names:
            means = staging[field].reshape(-1, len(names)).mean(axis=0)
            out.update({prefix + n: float(m) for n, m in zip(names, means, strict=True)})
    return out
