"""Tanh-squashed Gaussian actor for SAC, with its observation normalizer inside.

`forward(obs)` is the deterministic export path: tanh(mean) from raw observations.
`sample(obs)` draws reparameterized actions with their log-probabilities under the squashed
distribution (the learner's path); `act(obs)` (the `Policy` protocol, via `rollout_actions`) is the workers' no-grad sampling path, which
draws uniform actions in [-1, 1] instead while the `explore_uniform` buffer is set (the
learner sets it during warm-up; it travels with the published weights).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch.nn import functional as F

from unilab.policies.mlp import mlp
from unilab.policies.normalizer import RunningNormalizer
from unilab.policies.vector_policy import VectorPolicy

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class SquashedGaussianActor(VectorPolicy):
    explore_uniform: torch.Tensor

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
    ) -> None:
        super().__init__()
        if log_std_min >= log_std_max:
            raise ValueError(
                f"log_std_min ({log_std_min}) must be below log_std_max ({log_std_max})"
            )
        self.action_dim = action_dim
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max
        self.normalizer = RunningNormalizer(obs_dim)
        self.net = mlp(obs_dim, hidden, 2 * action_dim, activation)
        self.register_buffer("explore_uniform", torch.zeros(()))

    def mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-squash mean and log std from raw observations."""
        mean, raw = self.net(self.normalizer(obs)).chunk(2, dim=-1)
        # A smooth squeeze into [log_std_min, log_std_max] keeps gradients alive at the edges.
        span = self.log_std_max - self.log_std_min
        log_std = self.log_std_min + 0.5 * span * (torch.tanh(raw) + 1.0)
        return mean, log_std

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action tanh(mean), from raw observations."""
        mean, _ = self.mean_log_std(obs)
        return torch.tanh(mean)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized squashed sample and its log-probability (summed over actions)."""
        mean, log_std = self.mean_log_std(obs)
        noise = torch.randn_like(mean)
        pre = mean + noise * log_std.exp()
        gauss_logp = -0.5 * noise.square() - log_std - _LOG_SQRT_2PI
        # log|d tanh(u)/du| = log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), stable.
        log_det = 2.0 * (math.log(2.0) - pre - F.softplus(-2.0 * pre))
        return torch.tanh(pre), (gauss_logp - log_det).sum(-1)

    @torch.no_grad()
    def rollout_actions(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rollout actions and log-probabilities (uniform actions during warm-up)."""
        if deterministic:
            action = self.forward(obs)
            return action, torch.zeros(action.shape[:-1])
        if float(self.explore_uniform) > 0.5:
            action = torch.rand(*obs.shape[:-1], self.action_dim) * 2.0 - 1.0
            logp = torch.full(action.shape[:-1], -self.action_dim * math.log(2.0))
            return action, logp
        return self.sample(obs)
