"""The sim worker loop: a task's BatchedSim, a CPU copy of the policy, and a chunk writer.

`run_sim_worker(ctx, task, policy, ...)` is the loop; the process entry point that builds
the task and the policy from the run's config (`unilab.train.sim_worker:sim_worker_main`)
lives in the train layer and is handed to the supervisor by that "module:function" path,
so this layer never imports an algorithm.

Loop: take a free ring slot, run T steps into it, publish it with the policy version that
acted, then pick up newer weights. In sync mode the worker waits for the version after the
one it used (the learner publishes once it has learned from every worker's chunk); in
async mode it never waits for the learner, only for a free slot.

For a task with reset bins the published vector ends with one draw probability per bin
(`unilab.train.bin_allocation`): `_load` gives the head to the actor, the tail to the task.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from unilab.runtime.branching import BranchPlan
from unilab.runtime.flat_weights import flat_to_actor
from unilab.runtime.rollout import collect_chunk, start_rollout
from unilab.runtime.torch_policy import NumpyPolicy, PolicyModule
from unilab.runtime.worker_base import StopRequested, WorkerContext
from unilab.runtime.worker_state import (
    find_state_file,
    load_worker_state,
    save_worker_state,
    state_file,
)
from unilab.runtime.worker_stats import WorkerStats, WorkerStatsHandle
from unilab.tasks.base import Task

_WEIGHT_POLL_S = 0.0002


def pin_to_core(cores: list[int], index: int) -> None:
    """Pin this process to cores[index % len(cores)] (worker w → core w; learner: the last)."""
    import os

    os.sched_setaffinity(0, {cores[index % len(cores)]})


def _load(actor: PolicyModule, task: Task, flat: np.ndarray) -> None:
    bins = task.num_reset_bins
    if bins > 1:
        flat_to_actor(actor, flat[:-bins])
        task.bin_probs = flat[-bins:].astype(np.float64)
    else:
        flat_to_actor(actor, flat)


def _wait_for_weights(
    ctx: WorkerContext, actor: PolicyModule, task: Task, flat: np.ndarray, newer_than: int
) -> int:
    """Block (heartbeating) until a version newer than `newer_than` exists; load it."""
    assert ctx.weights is not None
    while True:
        got = ctx.weights.read_if_newer(newer_than, out=flat)
        if got is not None:
            _load(actor, task, got[1])
            return got[0]
        ctx.check_stop()
        time.sleep(_WEIGHT_POLL_S)


def run_sim_worker(
    ctx: WorkerContext,
    task: Task,
    actor: PolicyModule,
    sync: bool,
    n_act: int | None = None,
    branching: BranchPlan | None = None,
) -> None:
    """Collect chunks into the ring until stopped. `actor` is a CPU policy whose weights the
    loop replaces with each published version; `ctx.config` carries the stats segment and
    the worker-state settings (see `unilab.runtime.learner_side.LearnerRuntime`)."""
    stats = WorkerStats.attach(WorkerStatsHandle(**ctx.config["stats"]))
    wid = ctx.worker_id
    policy = NumpyPolicy(actor)
    assert ctx.weights is not None and ctx.ring is not None
    flat = np.empty(ctx.weights.num_floats, np.float32)
    state_dir = Path(ctx.config["state_dir"]) if ctx.config.get("state_dir") else None
    save_every = int(ctx.config.get("save_state_every", 0))
    # Sync mode: the chunk made with policy version v is learned in iteration offset + v.
    offset = int(ctx.config.get("iteration_offset", 0))

    rollout = start_rollout(task)
    seq = 0
    restore = ctx.config.get("restore_iteration")
    if restore is not None and state_dir is not None and ctx.generation == 0:
        path = find_state_file(state_dir, wid, int(restore))
        if path is None:
            raise FileNotFoundError(f"no worker {wid} state for iteration {restore} in {state_dir}")
        seq = load_worker_state(path, task, rollout)

    t_wait = time.perf_counter()
    version = _wait_for_weights(ctx, actor, task, flat, newer_than=0)
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
                    _load(actor, task, got[1])
                    loads = 1
            t1 = time.perf_counter()
            views = ctx.ring.views(slot)
            sim_before, inf_before, unstable_before, render_before = (
                rollout.sim_s,
                rollout.inference_s,
                rollout.sim_unstable,
                task.render_s,
            )
            collect_chunk(
                task, policy, views, rollout, ctx.stepped, n_act=n_act, branching=branching
            )
            seq_next = seq + 1
            iteration = offset + version
            if sync and state_dir is not None and save_every > 0 and iteration % save_every == 0:
                path = state_file(state_dir, wid, iteration, ctx.generation)
                save_worker_state(path, task, rollout, seq_next)
            ctx.ring.publish(slot, seq=seq, policy_version=version, step_count=rollout.env_steps)
            seq = seq_next
            t2 = time.perf_counter()
            sim_s, inf_s = rollout.sim_s - sim_before, rollout.inference_s - inf_before
            render_s = task.render_s - render_before
            if sync:
                version = _wait_for_weights(ctx, actor, task, flat, newer_than=version)
                loads += 1
            t3 = time.perf_counter()
            stats.add(
                wid,
                sim_s=max(0.0, sim_s - render_s),
                render_s=render_s,
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
