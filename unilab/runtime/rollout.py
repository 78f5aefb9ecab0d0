"""Policies in a task: `rollout` (play, eval, recorders, benches) and `collect_chunk` (workers).

Both drive the task through the one policy contract (`unilab.runtime.policy.Policy`) and
execute action chunks with `ActionQueue`: each env takes `n_act` actions of a chunk before
the policy plans again for it (MLP actors: H = n_act = 1, a plain step loop). `rollout`
runs a policy that brings its own executor (`ChunkedPolicy`: the VLA) through that one:
its `n_act` and temporal ensembling by default, the flow's noise drawn from `noise_seed`,
so a rollout is reproducible from its seeds.

`collect_chunk` fills the transition fields (see `unilab.runtime.fields.transition_fields`),
each (T, N, ...):

- `obs_<group>`: observation at step t (after any auto-reset of step t-1); camera images
  as uint8 `images_<cam>` and depth as `depth_<cam>` (`unilab.runtime.fields.ring_field`);
- `next_obs_<group>`: observation after step t, *before* auto-reset, so a learner can
  bootstrap time-outs; equal to `obs_<group>[t+1]` wherever the episode goes on;
- `action`: what the env executed at step t; `logprob`: the log-probability of the chunk
  that action belongs to (for H = 1, of the action itself);
- `reward`, `terminated`, `truncated`: as the task returned them (flags as 0/1 floats);
- `episode_return`, `episode_length`: of an episode that ended at step t; NaN / 0 elsewhere;
- `reward_terms`, `task_metrics` (optional, for logging): each term / metric in sorted name order;
- `episode_bin` (tasks with reset bins): the bin of an episode that ended at step t; -1 elsewhere;
- `replanned` (optional): 1 where the env got a new chunk at step t (a decision point);
- `episode_success` (optional): the task's `success` (1/0) of an episode that ended at
  step t; NaN elsewhere (and where the task has no success metric);
- policy extras (optional, `unilab.runtime.fields.POLICY_EXTRA_FIELDS`, e.g. a flow chain):
  the `ActionChunk.extras` of the chunk step t's action belongs to.

The same function fills a shared-memory ring slot in a worker and a plain array in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unilab.runtime.branching import BranchPlan
from unilab.runtime.fields import POLICY_EXTRA_FIELDS, obs_group_of
from unilab.runtime.policy import ActionQueue, EpisodicPolicy, Policy, StepExecutor
from unilab.runtime.torch_policy import PolicyModule, as_numpy_policy, own_executor
from unilab.tasks.base import StepResult, Task

SUCCESS_METRIC = "success"
"""The task metric (in `StepResult.extras`) that marks a successful episode at its end."""

AnyPolicy = Policy[np.ndarray] | PolicyModule


# -- rollout: a policy for a number of steps or episodes ------------------------------------
@dataclass
class StepInfo:
    """What `on_step` sees after each step."""

    step: int
    """Steps taken so far, this one included (1 after the first step)."""
    obs: dict[str, np.ndarray]
    """The observations the actions were chosen from."""
    actions: np.ndarray
    """(N, action_dim) executed at this step."""
    result: StepResult
    planned: np.ndarray
    """(N,) bool: envs for which the policy planned a new chunk at this step."""
    intervention: np.ndarray | None = None
    """(N,) bool: envs whose action came from a takeover (`rollout(takeover=...)`); None
    without one."""


@dataclass
class Episode:
    env: int
    ret: float
    length: int
    reasons: list[str]
    success: bool | None
    """The task's `success` metric at the episode's last step; None if it has none."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Each task metric (`StepResult.extras`: tracking error, lift height, ...) averaged
    over the episode's steps."""
    intervened: bool = False
    """A takeover drove some of the episode's steps (so `success` is not the policy's alone)."""

    def to_dict(self) -> dict[str, Any]:
        """{env, return, length, success, reasons, metrics}: the eval report's episode row."""
        return {
            "env": self.env,
            "return": self.ret,
            "length": self.length,
            "success": self.success,
            "reasons": list(self.reasons),
            "metrics": dict(self.metrics),
            "intervened": self.intervened,
        }


@dataclass
class RolloutResult:
    steps: int
    episodes: list[Episode] = field(default_factory=list)
    """Counted episodes in the order they ended (env order within a step)."""
    obs: dict[str, np.ndarray] = field(default_factory=dict)
    """The observations after the last step (to continue from)."""

    @property
    def has_success(self) -> bool:
        return any(e.success is not None for e in self.episodes)

    def success_rate(self) -> float | None:
        rated = [e.success for e in self.episodes if e.success is not None]
        return float(np.mean(rated)) if rated else None

    def mean_return(self) -> float | None:
        return float(np.mean([e.ret for e in self.episodes])) if self.episodes else None


def rollout(
    task: Task,
    policy: AnyPolicy,
    *,
    steps: int | None = None,
    episodes: int | None = None,
    one_per_env: bool = False,
    deterministic: bool = True,
    n_act: int | None = None,
    ensemble_decay: float | None = None,
    noise_seed: int = 0,
    on_step: Callable[[StepInfo], None] | None = None,
    obs: dict[str, np.ndarray] | None = None,
    takeover: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
) -> RolloutResult:
    """Run `policy` in `task` until `steps` steps or `episodes` counted episodes, whichever
    comes first (at least one limit is needed).

    `one_per_env`: count only each env's first episode (envs that finish early run on,
    uncounted, so short episodes are not over-represented: the eval protocol). `obs`: start
    from these observations instead of `task.reset()`. `n_act`: actions executed per chunk
    (default: the policy's own `n_act` for a `ChunkedPolicy`, else all H of them).
    `ensemble_decay` (temporal ensembling; default: the policy's own setting) and
    `noise_seed` apply to policies with their own executor (the VLA), whose sampled chunks
    then depend only on the seeds. `takeover`: maps the policy's actions to the executed
    ones and a (N,) intervention mask each step (`unilab.runtime.takeover.ExpertTakeover`).
    """
    if steps is None and episodes is None:
        raise ValueError("rollout needs a limit: steps=..., episodes=... or both")
    if steps is not None and steps < 0:
        raise ValueError(f"steps={steps} must be >= 0")
    if episodes is not None and episodes < 1:
        raise ValueError(f"episodes={episodes} must be at least 1")
    if one_per_env and episodes is not None and episodes > task.num_envs:
        raise ValueError(
            f"episodes={episodes} with one episode per env needs at least that many envs "
            f"(the task has {task.num_envs})"
        )
    numpy_policy = as_numpy_policy(policy)
    _check_shapes(task, numpy_policy)
    stepper = step_executor(
        numpy_policy, task.num_envs, n_act, ensemble_decay, noise_seed, deterministic
    )
    obs = task.reset() if obs is None else obs
    result = RolloutResult(0)
    counted = np.zeros(task.num_envs, dtype=bool)
    sums: dict[str, np.ndarray] = {}  # per metric, (N,) sums over each env's episode
    steps_in = np.zeros(task.num_envs)  # steps summed (an episode may predate the rollout)
    intervened = np.zeros(task.num_envs, dtype=bool)
    step = 0
    while (steps is None or step < steps) and (episodes is None or len(result.episodes) < episodes):
        current = obs
        actions = stepper(current)
        planned = stepper.replanned.copy()
        intervention = None
        if takeover is not None:
            actions, intervention = takeover(actions)
            intervened |= intervention
        out = task.step(actions)
        step += 1
        ended = out.terminated | out.truncated
        if ended.any():
            stepper.reset(np.flatnonzero(ended))
        success = out.extras.get(SUCCESS_METRIC)
        for name, values in out.extras.items():
            sums.setdefault(name, np.zeros(task.num_envs))
            sums[name] += values
        steps_in += 1
        for env in np.flatnonzero(ended & ~counted if one_per_env else ended):
            n = steps_in[env]
            result.episodes.append(
                Episode(
                    env=int(env),
                    ret=float(out.episode_return[env]),
                    length=int(out.episode_length[env]),
                    reasons=sorted(k for k, v in out.reasons.items() if v[env]),
                    success=None if success is None else bool(success[env] > 0.5),
                    metrics={k: float(v[env]) / n for k, v in sorted(sums.items())},
                    intervened=bool(intervened[env]),
                )
            )
        for values in sums.values():
            values[ended] = 0.0
        steps_in[ended] = 0
        intervened[ended] = False
        if one_per_env:
            counted |= ended
        if on_step is not None:
            on_step(StepInfo(step, current, actions, out, planned, intervention))
        obs = out.obs
    result.steps = step
    result.obs = obs
    return result


class QueueExecutor:
    """`StepExecutor` over `ActionQueue`, for policies without their own executor."""

    def __init__(
        self, policy: Policy[np.ndarray], num_envs: int, n_act: int, deterministic: bool
    ) -> None:
        self.policy, self.deterministic = policy, deterministic
        self.queue = ActionQueue(num_envs, policy.action_dim, n_act)

    @property
    def replanned(self) -> np.ndarray:
        return self.queue.planned

    def __call__(self, obs: dict[str, np.ndarray] | Any) -> np.ndarray:
        return self.queue.next(self.policy, obs, self.deterministic)

    def reset(self, envs: np.ndarray | None = None) -> None:
        ended = np.zeros(self.queue.num_envs, dtype=bool)
        ended[np.arange(self.queue.num_envs) if envs is None else envs] = True
        self.queue.episodes_ended(ended)


def step_executor(
    policy: Policy[np.ndarray],
    num_envs: int,
    n_act: int | None = None,
    ensemble_decay: float | None = None,
    noise_seed: int = 0,
    deterministic: bool = True,
) -> StepExecutor:
    """How `rollout` turns `policy`'s chunks into per-step actions: the policy's own
    executor when it has one, else an `ActionQueue` (which cannot ensemble chunks)."""
    chunked = own_executor(policy)
    if chunked is not None:
        return chunked.executor(
            num_envs, seed=noise_seed, n_act=n_act, ensemble_decay=ensemble_decay
        )
    if ensemble_decay is not None:
        raise ValueError(
            "temporal ensembling needs a policy with its own chunk executor (the VLA); "
            f"{type(policy).__name__} has none"
        )
    return QueueExecutor(policy, num_envs, n_act or policy.action_horizon, deterministic)


def _check_shapes(task: Task, policy: Policy[np.ndarray]) -> None:
    spec = task.observation_spec()
    # a VLA's conditions (behaviour token, advantage indicator) are optional inputs
    inner = getattr(policy, "policy", policy)
    optional = set(getattr(inner, "condition_names", ()))
    missing = [g for g in policy.obs_groups if g not in spec and g not in optional]
    if missing or policy.action_dim != task.action_dim:
        groups = {g: s.shape for g, s in spec.items()}
        raise ValueError(
            f"policy reads observation groups {list(policy.obs_groups)} and acts with "
            f"{policy.action_dim} actions; task {task.cfg.name!r} has groups {groups} "
            f"and {task.action_dim} actions"
        )


# -- collect_chunk: a worker's T steps into a ring slot -------------------------------------
@dataclass
class RolloutState:
    """What carries over from one chunk to the next inside a worker."""

    obs: dict[str, np.ndarray]
    env_steps: int = 0
    sim_unstable: int = 0
    inference_s: float = 0.0
    sim_s: float = 0.0
    queue: ActionQueue | None = None
    """Chunk execution state (for H > 1, the rest of each env's current chunk)."""


def start_rollout(task: Task) -> RolloutState:
    return RolloutState(obs=task.reset())


def collect_chunk(
    task: Task,
    policy: AnyPolicy,
    out: dict[str, np.ndarray],
    state: RolloutState,
    on_step: Callable[[], None] | None = None,
    n_act: int | None = None,
    branching: BranchPlan | None = None,
) -> RolloutState:
    """Run T = out['action'].shape[0] steps with sampled actions, writing every field of
    `out` in place. `on_step` runs once per step (a worker's heartbeat). `branching` forks
    groups of envs from their leader's state (`unilab.runtime.branching`); `out` then has
    a `branch_point` field."""
    numpy_policy = as_numpy_policy(policy)
    if state.queue is None:
        state.queue = ActionQueue(
            task.num_envs, task.action_dim, n_act or numpy_policy.action_horizon
        )
    queue = state.queue
    horizon = out["action"].shape[0]
    next_groups = [k.removeprefix("next_obs_") for k in out if k.startswith("next_obs_")]
    obs_fields = {k: g for k in out if (g := obs_group_of(k)) is not None}
    has_logprob = "logprob" in out
    has_terms, has_metrics = "reward_terms" in out, "task_metrics" in out
    has_bins = "episode_bin" in out
    has_replanned = "replanned" in out
    has_success = "episode_success" in out
    episodic = numpy_policy if isinstance(numpy_policy, EpisodicPolicy) else None
    extra_names = [k for k in out if k in POLICY_EXTRA_FIELDS]
    if branching is not None and "branch_point" not in out:
        raise ValueError("branching needs a branch_point field in the chunk")
    for t in range(horizon):
        t0 = time.perf_counter()
        action_np = queue.next(numpy_policy, state.obs)
        t1 = time.perf_counter()
        result = task.step(action_np)
        t2 = time.perf_counter()
        ended = result.terminated | result.truncated
        queue.episodes_ended(ended)
        if episodic is not None:
            episodic.episodes_ended(ended)
        for name, group in obs_fields.items():
            out[name][t] = state.obs[group]
        for group in next_groups:
            out[f"next_obs_{group}"][t] = result.final_obs[group]
        out["action"][t] = action_np
        if has_logprob:
            out["logprob"][t] = queue.logprob
        if has_replanned:
            out["replanned"][t] = queue.planned
        for name in extra_names:
            out[name][t] = queue.extras[name]
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
        if has_success:
            success = result.extras.get(SUCCESS_METRIC)
            out["episode_success"][t] = np.nan
            if success is not None:
                out["episode_success"][t, ended] = success[ended]
        if has_bins:
            out["episode_bin"][t] = -1 if result.episode_bin is None else result.episode_bin
        state.obs = result.obs
        if branching is not None:
            out["branch_point"][t] = 0.0
            forked = branching.fork(task, result.terminated | result.truncated)
            if forked is not None:
                mask, state.obs = forked
                out["branch_point"][t, mask] = float(branching.k)
                # a sibling's own trajectory stops here: bootstrapped, like a time-out
                cut = mask & ~(result.terminated | result.truncated)
                cut[:: branching.k] = False  # leaders go on
                out["truncated"][t, cut] = 1.0
                queue.episodes_ended(cut)
        state.sim_unstable += int(result.reasons["sim_unstable"].sum())
        state.inference_s += t1 - t0
        state.sim_s += t2 - t1
        if on_step is not None:
            on_step()
    state.env_steps += horizon * task.num_envs
    return state
