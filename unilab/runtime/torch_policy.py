"""Torch policies: the `nn.Module` base every actor shares, and the numpy adapter rollouts use.

`PolicyModule` is `unilab.runtime.policy.Policy[torch.Tensor]` as a module class, so a
learner can publish its weights and mypy sees `act` / `act_inference` on whatever an
algorithm's `build_actor` returns. `NumpyPolicy` wraps one for code that holds numpy
observations (the rollout helpers): zero-copy `torch.from_numpy` in, `.numpy()` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from unilab.runtime.policy import ActionChunk, ChunkedPolicy, EpisodicPolicy, Policy


class PolicyModule(nn.Module):
    """A torch policy; see `unilab.runtime.policy` for the contract."""

    @property
    def obs_groups(self) -> tuple[str, ...]:
        raise NotImplementedError

    action_dim: int
    action_horizon: int

    def act(
        self, obs: Mapping[str, torch.Tensor], deterministic: bool = False
    ) -> ActionChunk[torch.Tensor]:
        raise NotImplementedError

    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError


class NumpyPolicy:
    """`Policy[np.ndarray]` over a CPU torch policy (no gradients)."""

    def __init__(self, policy: PolicyModule) -> None:
        self.policy = policy

    @property
    def obs_groups(self) -> tuple[str, ...]:
        return self.policy.obs_groups

    @property
    def action_dim(self) -> int:
        return int(self.policy.action_dim)

    @property
    def action_horizon(self) -> int:
        return int(self.policy.action_horizon)

    def _tensors(self, obs: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        # Optional groups (a VLA's behaviour token) may be absent; the policy checks the rest.
        return {
            g: torch.from_numpy(np.ascontiguousarray(obs[g])) for g in self.obs_groups if g in obs
        }

    def episodes_ended(self, ended: np.ndarray) -> None:
        """Forwarded to a policy that keeps per-episode state (`EpisodicPolicy`)."""
        if isinstance(self.policy, EpisodicPolicy):
            self.policy.episodes_ended(ended)

    def act(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> ActionChunk[Any]:
        with torch.no_grad():
            chunk = self.policy.act(self._tensors(obs), deterministic)
        logprob = None if chunk.logprob is None else chunk.logprob.numpy()
        extras = {k: v.numpy() for k, v in chunk.extras.items()}
        return ActionChunk(chunk.actions.numpy(), logprob, extras)

    def act_inference(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            out: np.ndarray = self.policy.act_inference(self._tensors(obs)).numpy()
        return out


def own_executor(policy: Any) -> ChunkedPolicy | None:
    """The policy (or the torch policy a `NumpyPolicy` wraps) if it brings its own chunk
    executor (`unilab.runtime.policy.ChunkedPolicy`), else None."""
    inner = policy.policy if isinstance(policy, NumpyPolicy) else policy
    return inner if isinstance(inner, ChunkedPolicy) else None


def as_numpy_policy(policy: PolicyModule | Policy[np.ndarray]) -> Policy[np.ndarray]:
    """A torch policy wrapped for numpy observations; a numpy policy as it is."""
    if isinstance(policy, nn.Module):
        return NumpyPolicy(policy)
    return policy
