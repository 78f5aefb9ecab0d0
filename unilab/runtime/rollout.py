"""Fill one chunk of transitions from a task and an actor, in place.

The transition fields (see `unilab.algos.base.transition_fields`), each (T, N, ...):

- `obs_<group>`: observation at step t (after any auto-reset of step t-1);
- `next_obs_<group>`: observation after step t, *before* auto-reset, so a learner can
  bootstrap time-outs; equal to `obs_<group>[t+1]` wherever the episode goes on;
- `action`, `logprob`: what the actor did and its log-probability;
- `reward`, `terminated`, `truncated`: as the task returned them (flags as 0/1 floats);
- `episode_return`, `episode_length`: of an episode that ended at step t; NaN / 0 elsewhere;
- `reward_terms`, `task_metrics` (optional, for logging): each term / metric in sorted name order.

The same function fills a shared-memory ring slot in a worker and a plain array in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from unilab.tasks.base import Task


@dataclass
class RolloutState:
    """What carries over from one chunk to the next inside a worker."""

    obs: dict[str, np.ndarray]
    env_steps: int = 0
    sim_unstable: int = 0
    inference_s: float = 0.0
    sim_s: float = 0.0


def start_rollout(task: Task) -> RolloutState:
    return RolloutState(obs=task.reset())


def collect_chunk(
    task: Task,
    actor: torch.nn.Module,
    out: dict[str, np.ndarray],
    state: RolloutState,
    on_step: Callable[[], None] | None = None,
) -> RolloutState:
    """Run T = out['action'].shape[0] steps, writing every field of `out` in place.

    `on_step` runs once per step (a worker's heartbeat).
    """
    horizon = out["action"].shape[0]
    next_groups = [k.removeprefix("next_obs_") for k in out if k.startswith("next_obs_")]
    obs_groups = [k.removeprefix("obs_") for k in out if k.startswith("obs_")]
    has_logprob = "logprob" in out
    has_terms, has_metrics = "reward_terms" in out, "task_metrics" in out
    for t in range(horizon):
        t0 = time.perf_counter()
        policy_obs = torch.from_numpy(state.obs["policy"])
        action, logprob = actor.act(policy_obs)  # type: ignore[operator]
        action_np = action.numpy()
        t1 = time.perf_counter()
        result = task.step(action_np)
        t2 = time.perf_counter()
        for group in obs_groups:
            out[f"obs_{group}"][t] = state.obs[group]
        for group in next_groups:
            out[f"next_obs_{group}"][t] = result.final_obs[group]
        out["action"][t] = action_np
        if has_logprob:
            out["logprob"][t] = logprob.numpy()
        out["reward"][t] = result.reward
        out["terminated"][t] = result.terminated
        out["truncated"][t] = result.truncated
        out["episode_return"][t] = result.episode_return
        out["episode_length"][t] = result.episode_length
        if has_terms:
            terms = result.reward_terms
            out["reward_terms"][t] = np.stack([terms[k] for k in sorted(terms)], axis=-1)
        if has_metrics:
            extras = result.extras
            out["task_metrics"][t] = np.stack([extras[k] for k in sorted(extras)], axis=-1)
        state.obs = result.obs
        state.sim_unstable += int(result.reasons["sim_unstable"].sum())
        state.inference_s += t1 - t0
        state.sim_s += t2 - t1
        if on_step is not None:
            on_step()
    state.env_steps += horizon * task.num_envs
    return state
