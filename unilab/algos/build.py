"""One way to get a policy for a task: `build_policy`, and `make_task_and_policy` for both.

Play, eval, the training-time recorders, the mid-run evaluation, export, the sim workers
and the benchmarks all build their policy here, so "which network does algorithm X run on
task Y, with which weights" has one answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch

from unilab.config.schema import AlgoConfig, Config
from unilab.runtime.flat_weights import actor_to_flat, flat_to_actor
from unilab.runtime.torch_policy import PolicyModule
from unilab.tasks.base import Task

Weights = Mapping[str, torch.Tensor] | np.ndarray | PolicyModule
"""An actor state dict (a checkpoint's ``algo.actor``), a flat weight-store vector, or a
policy to copy (e.g. the learner's, possibly on an accelerator)."""


class TaskShapes(Protocol):
    """What a policy's shapes come from: a task (or anything with its observation layout).
    Algorithms that read images and token ids (`Algorithm.shaped_obs`) also need every
    group's shape: a task's `observation_spec()` or an `obs_shapes` mapping."""

    @property
    def obs_dims(self) -> dict[str, int]: ...

    @property
    def action_dim(self) -> int: ...


def build_policy(
    algo_cfg: AlgoConfig, task: TaskShapes, weights: Weights | None = None
) -> PolicyModule:
    """The actor `algo_cfg`'s algorithm runs on `task`, on the CPU in eval mode.

    `weights`, when given, are loaded into it (a shape mismatch is a ValueError naming both).
    """
    from unilab.algos.registry import ALGORITHMS

    entry = ALGORITHMS.get(algo_cfg.name)
    obs = policy_obs_shapes(entry.algo_cls, task)
    policy = entry.algo_cls.build_actor(algo_cfg, obs, int(task.action_dim))
    if weights is not None:
        load_weights(policy, weights)
    return policy.eval()


def observation_shapes(task: Any) -> dict[str, tuple[int, ...]]:
    """Every observation group's per-env shape: a task's `observation_spec()`, or the
    `obs_shapes` of something that carries them (the Runner's `TaskShapes`)."""
    shapes = getattr(task, "obs_shapes", None)
    if shapes is None:
        shapes = {k: spec.shape for k, spec in task.observation_spec().items()}
    return {str(k): tuple(int(d) for d in v) for k, v in dict(shapes).items()}


def policy_obs_shapes(algo_cls: Any, task: TaskShapes) -> dict[str, Any]:
    """What an algorithm builds its networks from: the vector groups' widths, or every
    group's shape for algorithms that read images and token ids (`Algorithm.shaped_obs`)."""
    if getattr(algo_cls, "shaped_obs", False):
        return dict(observation_shapes(task))
    return dict(task.obs_dims)


def load_weights(policy: PolicyModule, weights: Weights) -> None:
    if isinstance(weights, torch.nn.Module):
        flat_to_actor(policy, actor_to_flat(weights))
    elif isinstance(weights, np.ndarray):
        flat_to_actor(policy, weights)
    else:
        try:
            policy.load_state_dict(dict(weights))
        except RuntimeError as exc:  # torch names missing / unexpected keys and shapes
            raise ValueError(
                f"the weights do not fit {type(policy).__name__} for this task and config: {exc}"
            ) from None


def make_task_and_policy(
    cfg: Config,
    num_envs: int,
    seed: int,
    weights: Weights | None = None,
    nthread: int = 1,
) -> tuple[Task, PolicyModule]:
    """`cfg`'s task with `num_envs` envs and the policy its algorithm runs on it."""
    from unilab.tasks.registry import make_task

    task = make_task(cfg.task, num_envs=num_envs, seed=seed, nthread=nthread, sim_cfg=cfg.sim)
    return task, build_policy(cfg.algo, task, weights)
