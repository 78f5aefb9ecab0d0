"""MLP actor-critic for PPO/APPO: Gaussian actor and value critic, each with its normalizer.

The actor alone is what workers run and what export writes (a `unilab.runtime.policy.Policy`,
H = 1); its `forward` is the deterministic path (mean action from raw observations). The critic may read a different
observation group (`critic`) for an asymmetric setup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from unilab.policies.mlp import mlp
from unilab.policies.normalizer import RunningNormalizer
from unilab.policies.vector_policy import VectorPolicy


class GaussianActor(VectorPolicy):
    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 128, 64),
        activation: str = "elu",
        init_std: float = 1.0,
    ) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.normalizer = RunningNormalizer(obs_dim)
        self.net = mlp(obs_dim, hidden, action_dim, activation)
        self.log_std = nn.Parameter(torch.full((action_dim,), math.log(init_std)))
        last = self.net[-1]
        assert isinstance(last, nn.Linear)
        nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (the mean), from raw observations."""
        return self.net(self.normalizer(obs))

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Normal:
        mean = self.forward(obs)
        # validate_args=False: the checks cost more than the MLP at rollout batch sizes.
        return torch.distributions.Normal(
            mean, self.log_std.exp().expand_as(mean), validate_args=False
        )

    @torch.no_grad()
    def rollout_actions(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample actions and their log-probabilities, for rollouts."""
        dist = self.distribution(obs)
        action = dist.mean if deterministic else dist.sample()
        return action, dist.log_prob(action).sum(-1)


class ValueCritic(nn.Module):
    def __init__(
        self, obs_dim: int, hidden: Sequence[int] = (256, 128, 64), activation: str = "elu"
    ) -> None:
        super().__init__()
        self.normalizer = RunningNormalizer(obs_dim)
        self.net = mlp(obs_dim, hidden, 1, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(self.normalizer(obs)).squeeze(-1)
