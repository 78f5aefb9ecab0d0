"""The sim worker process: a task's BatchedSim, a CPU copy of the actor, and a chunk writer.

Loop: take a free ring slot, run T steps into it, publish it with the policy version that
acted, then pick up newer weights. In sync mode the worker waits for the version after the
one it used (the learner publishes once it has learned from every worker's chunk); in
async mode it never waits for the learner, only for a free slot.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from unilab.algos.base import flat_to_actor
from unilab.runtime.rollout import collect_chunk, start_rollout
from unilab.runtime.worker_base import StopRequested, WorkerContext
from unilab.runtime.worker_state import load_worker_state, save_worker_state, state_file
from unilab.runtime.worker_stats import WorkerStats, WorkerStatsHandle

_WEIGHT_POLL_S = 0.0002


def pin_to_core(cores: list[int], index: int) -> None:
    """Pin this process to cores[index % len(cores)] (worker w → core w; learner: the last)."""
    import os

    os.sched_setaffinity(0, {cores[index % len(cores)]})


def _wait_for_weights(
    ctx: WorkerContext, actor: torch.nn.Module, flat: np.ndarray, newer_than: int
) -> int:
    """Block (heartbeating) until a version newer than `newer_than` exists; load it."""
    assert ctx.weights is not None
    while True:
        got = ctx.weights.read_if_newer(newer_than, out=flat)
        if got is not None:
            flat_to_actor(actor, got[1])
            return got[0]
        ctx.check_stop()
        time.sleep(_WEIGHT_POLL_S)


def sim_worker_main(ctx: WorkerContext) -> None:
    torch.set_num_threads(1)  # MuJoCo's threads own this worker's cores
    from unilab.algos.registry import ALGORITHMS
    from unilab.config.compose import config_from_yaml
    from unilab.tasks.registry import make_task

    cfg = config_from_yaml(ctx.config["config_yaml"])
    if cfg.runtime.pin_cpus:
        pin_to_core(ctx.config["cores"], ctx.worker_id)
    stats = WorkerStats.attach(WorkerStatsHandle(**ctx.config["stats"]))
    wid = ctx.worker_id
    torch.manual_seed(ctx.seed)
    task = make_task(
        cfg.task,
        num_envs=ctx.num_envs,
        seed=ctx.seed,
        nthread=cfg.runtime.threads_per_worker,
        sim_cfg=cfg.sim,
    )
    algo_cls = ALGORITHMS.get(cfg.algo.name).algo_cls
    actor = algo_cls.build_actor(cfg.algo, task.obs_dims, task.action_dim).eval()
    assert ctx.weights is not None and ctx.ring is not None
    flat = np.empty(ctx.weights.num_floats, np.float32)
    sync = cfg.runtime.mode == "sync"
    state_dir = Path(ctx.config["state_dir"]) if ctx.config.get("state_dir") else None
    save_every = int(ctx.config.get("save_state_every", 0))

    rollout = start_rollout(task)
    seq = 0
    restore = ctx.config.get("restore_chunk")
    if restore is not None and state_dir is not None and ctx.generation == 0:
        seq = load_worker_state(state_file(state_dir, wid, int(restore)), task, rollout)

    t_wait = time.perf_counter()
    version = _wait_for_weights(ctx, actor, flat, newer_than=0)
    stats.add(wid, wait_s=time.perf_counter() - t_wait, weight_loads=1)
    try:
        while True:
            t0 = time.perf_counter()
            slot = ctx.acquire_slot()
            loads = 0
            if not sync:
                # Pick up weights published while we waited for the slot: the chunk is then
                # made by the newest policy, which keeps staleness at its minimum.
                got = ctx.weights.read_if_newer(version, out=flat)
                if got is not None:
                    version = got[0]
                    flat_to_actor(actor, got[1])
                    loads = 1
            t1 = time.perf_counter()
            views = ctx.ring.views(slot)
            sim_before, inf_before, unstable_before = (
                rollout.sim_s,
                rollout.inference_s,
                rollout.sim_unstable,
            )
            collect_chunk(task, actor, views, rollout, on_step=ctx.heartbeat)
            seq_next = seq + 1
            if sync and state_dir is not None and save_every > 0 and seq_next % save_every == 0:
                save_worker_state(state_file(state_dir, wid, seq_next), task, rollout, seq_next)
            ctx.ring.publish(slot, seq=seq, policy_version=version, step_count=rollout.env_steps)
            seq = seq_next
            t2 = time.perf_counter()
            sim_s, inf_s = rollout.sim_s - sim_before, rollout.inference_s - inf_before
            if sync:
                version = _wait_for_weights(ctx, actor, flat, newer_than=version)
                loads += 1
            t3 = time.perf_counter()
            stats.add(
                wid,
                sim_s=sim_s,
                inference_s=inf_s,
                write_s=max(0.0, (t2 - t1) - sim_s - inf_s),
                wait_s=(t1 - t0) + (t3 - t2),
                env_steps=task.num_envs * views["action"].shape[0],
                chunks=1,
                sim_unstable=rollout.sim_unstable - unstable_before,
                weight_loads=loads,
            )
    except StopRequested:
        raise
