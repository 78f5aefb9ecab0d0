"""The policy contract: what rollout, the sim workers, export, play, eval and deploy call.

A policy maps a batch of observations, a dict of named groups, to an *action chunk*:

- observations: ``{group: (N, ...)}``. Today every group is a float32 vector ``(N, d)``
  (``policy``, ``critic``); later groups are uint8 images ``(N, H, W, C)``, int64 instruction
  token ids ``(N, L)`` and an int64 behaviour token ``(N,)``. A policy names the groups it
  reads in ``obs_groups``; others in the dict are ignored.
- output: `ActionChunk` with ``actions`` ``(N, H, action_dim)`` float32, H = ``action_horizon``
  >= 1 (the MLP actors are H = 1), ``logprob`` ``(N,)`` the log-probability of the whole
  chunk under the policy (None where a policy has none, e.g. ONNX), and ``extras``: optional
  per-chunk arrays (a value estimate, the token used, ...), keyed by name.
- ``act(obs, deterministic=False)`` is the rollout path (sampling unless deterministic);
  ``act_inference(obs)`` is the deterministic path that export traces: the same actions as
  ``act(obs, deterministic=True).actions``, with no sampling and no side effects.

The protocol is generic in the array type: torch actors are ``Policy[torch.Tensor]``
(`unilab.policies`), the onnxruntime policy and the zero/random baselines are
``Policy[numpy.ndarray]`` (torch-free, `unilab.deploy`). `unilab.runtime.torch_policy`
adapts a torch policy to numpy for the rollout helpers.

A chunked policy (H > 1) executes ``n_act <= H`` actions of a chunk before it plans again;
`ActionQueue` does that bookkeeping per env for a batch (and for one robot, N = 1). A
policy may bring its own executor (`ChunkedPolicy`: the VLA, whose executor re-plans only
the envs that need it, draws the flow's noise from a seed and can ensemble chunks over
time); the rollout helpers then use it instead of `ActionQueue`.

This module imports neither torch nor the task stack: the deploy side reads it with only
numpy and onnxruntime installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

ArrayT = TypeVar("ArrayT")


@dataclass(frozen=True)
class ActionChunk(Generic[ArrayT]):
    actions: ArrayT
    """(N, H, action_dim) float32."""
    logprob: ArrayT | None = None
    """(N,) log-probability of each env's whole chunk, or None."""
    extras: Mapping[str, ArrayT] = field(default_factory=dict)
    """Optional per-chunk outputs by name (leading dim N)."""


@runtime_checkable
class Policy(Protocol[ArrayT]):
    """See the module docstring. Implementations: `unilab.policies.*` actors (torch),
    `unilab.deploy.onnx_policy.OnnxPolicy` and `unilab.deploy.policy_source` baselines (numpy)."""

    @property
    def obs_groups(self) -> tuple[str, ...]:
        """Observation groups the policy reads."""
        ...

    @property
    def action_dim(self) -> int: ...

    @property
    def action_horizon(self) -> int:
        """H, the actions per chunk (>= 1)."""
        ...

    def act(self, obs: Mapping[str, ArrayT], deterministic: bool = False) -> ActionChunk[ArrayT]:
        """One chunk per env: actions (N, H, action_dim), chunk log-probability, extras."""
        ...

    def act_inference(self, obs: Mapping[str, ArrayT]) -> ArrayT:
        """Deterministic actions (N, H, action_dim): the path export traces."""
        ...


class StepExecutor(Protocol):
    """Turns a chunked policy into one action per env step (`ChunkedPolicy.executor`)."""

    @property
    def replanned(self) -> np.ndarray:
        """(N,) bool: envs that got a new chunk at the last call."""
        ...

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """(N, action_dim) float32 actions of this step."""
        ...

    def reset(self, envs: np.ndarray | None = None) -> None:
        """These envs (all when None) started new episodes: they plan at their next step."""
        ...


@runtime_checkable
class ChunkedPolicy(Protocol):
    """A policy with its own chunk executor (numpy in, numpy out)."""

    def executor(
        self,
        num_envs: int,
        seed: int = 0,
        n_act: int | None = None,
        ensemble_decay: float | None = None,
    ) -> StepExecutor:
        """An executor for `num_envs` envs: `n_act` actions per chunk and temporal
        ensembling decay (None: the policy's own settings), noise drawn from `seed`."""
        ...


@runtime_checkable
class EpisodicPolicy(Protocol):
    """A policy that keeps per-env state for an episode (the VLA's exploration token):
    rollouts tell it where episodes ended, after the step that ended them."""

    def episodes_ended(self, ended: np.ndarray) -> None:
        """(N,) bool: these envs start a new episode at their next step."""
        ...


def check_chunk(chunk: ActionChunk[np.ndarray], num_envs: int, action_dim: int) -> np.ndarray:
    """The chunk's actions as a float32 (N, H, action_dim) array; a clear error otherwise."""
    actions = np.asarray(chunk.actions, dtype=np.float32)
    if actions.ndim != 3 or actions.shape[0] != num_envs or actions.shape[2] != action_dim:
        raise ValueError(
            f"policy returned actions of shape {actions.shape}; the Policy protocol wants "
            f"(num_envs={num_envs}, H, action_dim={action_dim})"
        )
    if actions.shape[1] < 1:
        raise ValueError("policy returned an empty chunk (H = 0)")
    return actions


class ActionQueue:
    """Executes action chunks over env steps: each env takes `n_act` actions of a chunk, then
    the policy plans again for it. An env whose episode ended plans afresh at its next step
    (its new episode never executes the rest of the old chunk).

    `next(policy, obs)` returns the (N, action_dim) actions of this step (a fresh array the
    caller may keep); the policy is
    called only when some env needs a new chunk, and the chunk (and its log-probability) is
    kept only for those envs. With H = n_act = 1 every step plans for every env, so an MLP
    actor is called exactly as a plain step loop would call it.
    """

    def __init__(self, num_envs: int, action_dim: int, n_act: int) -> None:
        if n_act < 1:
            raise ValueError(f"n_act={n_act} must be at least 1")
        self.num_envs, self.action_dim, self.n_act = num_envs, action_dim, n_act
        self.cursor = np.zeros(num_envs, dtype=np.int64)
        """Index of each env's next action in its chunk; 0 means it plans at its next step."""
        self.actions = np.zeros((num_envs, n_act, action_dim), dtype=np.float32)
        self.logprob: np.ndarray = np.zeros(num_envs, dtype=np.float32)
        self.planned = np.ones(num_envs, dtype=bool)
        """Which envs got a new chunk at the last step."""
        self.extras: dict[str, np.ndarray] = {}
        """Each env's current chunk's extras (`ActionChunk.extras`: a flow chain, ...), by
        name, kept like the log-probability: replaced only for the envs that re-plan."""

    def next(
        self,
        policy: Policy[np.ndarray],
        obs: Mapping[str, np.ndarray],
        deterministic: bool = False,
    ) -> np.ndarray:
        need = self.cursor == 0
        self.planned = need
        if not need.any():
            step = self.actions[np.arange(self.num_envs), self.cursor]
            self.cursor = (self.cursor + 1) % self.n_act
            return step
        chunk = policy.act(obs, deterministic)
        actions = check_chunk(chunk, self.num_envs, self.action_dim)
        if actions.shape[1] < self.n_act:
            raise ValueError(
                f"policy chunks hold {actions.shape[1]} actions; cannot execute n_act="
                f"{self.n_act} of them"
            )
        logprob = None if chunk.logprob is None else np.asarray(chunk.logprob, np.float32)
        if self.n_act == 1:  # every env plans every step: no bookkeeping (MLP actors)
            if logprob is not None:
                self.logprob = logprob
            for name, value in chunk.extras.items():
                self.extras[name] = np.asarray(value)
            return actions[:, 0]
        self.actions[need] = actions[need, : self.n_act]
        if logprob is not None:
            self.logprob[need] = logprob[need]
        for name, value in chunk.extras.items():
            value = np.asarray(value)
            kept = self.extras.get(name)
            if kept is None or kept.shape != value.shape or kept.dtype != value.dtype:
                kept = self.extras[name] = np.zeros_like(value)
            kept[need] = value[need]
        step = self.actions[np.arange(self.num_envs), self.cursor]
        self.cursor = (self.cursor + 1) % self.n_act
        return step

    def episodes_ended(self, ended: np.ndarray) -> None:
        """Envs whose episode ended at this step plan afresh at the next one."""
        if self.n_act > 1:
            self.cursor[ended] = 0
