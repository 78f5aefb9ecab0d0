"""Learner ranks other than 0 under torchrun, and `train_distributed` that picks the role.

A follower runs its own sim workers and learns on its shard of each batch in lock-step with
rank 0 (`unilab.train.distributed`), but writes nothing: no run directory, no logs, no
checkpoints. At start it takes from rank 0 the checkpoint to resume from (read from the same
run directory: on several machines it must be on a shared filesystem), then rank 0's
parameters and RNG state. Its workers' seeds are offset by rank so ranks see different
episodes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from pathlib import Path

import torch

from unilab.algos.base import Algorithm
from unilab.algos.registry import ALGORITHMS
from unilab.config.compose import to_yaml
from unilab.config.errors import ConfigError
from unilab.config.schema import Config
from unilab.runtime.fields import info_fields
from unilab.runtime.learner_side import LearnerRuntime
from unilab.runtime.signals import StopSignal, install_signal_handlers
from unilab.train.bin_allocation import RolloutAllocation
from unilab.train.distributed import World, init_world
from unilab.train.hooks import RunResult, TrainHook
from unilab.train.runner import Runner, probe_task
from unilab.train.sim_worker import WORKER_TARGET
from unilab.utils.checkpoint import load_checkpoint
from unilab.utils.device import DeviceError, select_device

RANK_SEED_STRIDE = 1_000_003
"""Rank r's workers use run.seed + r * this (rank 0 keeps the single-process seeds)."""


def train_distributed(cfg: Config, hooks: Iterable[TrainHook] = ()) -> RunResult | None:
    """Join torchrun's group; rank 0 runs the `Runner` with `hooks` and returns its result,
    the other ranks follow and return None."""
    try:
        device = select_device(cfg.device)
    except DeviceError as exc:
        raise ConfigError(str(exc)) from None
    world = init_world(device)
    try:
        if world.is_main:
            return Runner(cfg, hooks, world=world).learn()
        follow(cfg, world)
        return None
    finally:
        world.close()


def follow(cfg: Config, world: World) -> int:
    """Rank `world.rank` > 0: learn in lock-step with rank 0 until it stops; returns the
    iterations run."""
    algo_cls: type[Algorithm] = ALGORITHMS.get(cfg.algo.name).algo_cls
    if not algo_cls.supports_data_parallel:
        raise ConfigError(world.unsupported(cfg.algo.name))
    torch.manual_seed(cfg.run.seed)
    shapes = probe_task(cfg)
    algo = algo_cls(cfg.algo, shapes.obs_dims, shapes.action_dim, world.device)
    env_steps = 0
    resume = world.broadcast_text("")
    if resume:
        state = load_checkpoint(Path(resume), map_location=world.device)
        algo.load_state_dict(state["algo"])
        env_steps = int(state["env_steps"])
    world.attach(algo)
    world.share_rng()
    own = dataclasses.replace(
        cfg, run=dataclasses.replace(cfg.run, seed=cfg.run.seed + world.rank * RANK_SEED_STRIDE)
    )
    fields = algo_cls.rollout_fields(cfg.algo, shapes)
    branching = cfg.runtime.branching_k > 1
    fields.update(
        info_fields(shapes.reward_terms, shapes.task_metrics, shapes.reset_bins, branching)
    )
    # this rank's own posteriors, from its own workers' episodes
    allocation = RolloutAllocation(own, shapes.reset_bins, shapes.task_metrics, own.run.seed)
    runtime = LearnerRuntime(
        own,
        to_yaml(own),
        fields,
        allocation.num_floats(algo.actor),
        world.device,
        worker_target=WORKER_TARGET,
    )
    stop = StopSignal()
    restore_signals = install_signal_handlers(stop.set)
    iterations = 0
    t_start = time.perf_counter()
    try:
        runtime.start()
        runtime.publish(allocation.weights(algo.actor))
        while True:
            late = bool(cfg.run.max_wall_s and time.perf_counter() - t_start > cfg.run.max_wall_s)
            if not world.agree(env_steps < cfg.run.total_env_steps and not stop and not late):
                break
            batch = runtime.next_batch()
            algo.update(batch.tensors)
            allocation.learn(runtime.host_batch)
            runtime.publish(allocation.weights(algo.actor))
            env_steps += batch.env_steps * world.size
            iterations += 1
    finally:
        runtime.close()
        restore_signals()
    return iterations
