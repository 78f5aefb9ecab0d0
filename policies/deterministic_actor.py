"""Deterministic tanh actor for TD3, with its observation normalizer inside.

`forward(obs)` is the export path. `act(obs)` (the `Policy` protocol, via
`rollout_actions`) explores as FastTD3 does: each env draws its
own noise scale uniformly in [noise_std_min, noise_std_max] and keeps it for a while (it
is redrawn with probability `noise_resample_prob` per step, about once an episode), adds
Gaussian noise of that scale to the deterministic action and clips to [-1, 1]. A spread
of scales lets some envs explore widely while others stay near the policy. While the
`explore_uniform` buffer is set (warm-up), actions are uniform in [-1, 1].

The per-env scales are rollout state of one worker, not weights: they are not in the
state dict and are re-drawn when the number of envs changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from unilab.policies.mlp import mlp
from unilab.policies.normalizer import RunningNormalizer
from unilab.policies.vector_policy import VectorPolicy


class DeterministicActor(VectorPolicy):
    explore_uniform: torch.Tensor

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        noise_std_min: float = 0.1,
        noise_std_max: float = 0.1,
        noise_resample_prob: float = 0.01,
    ) -> None:
        super().__init__()
        if not 0.0 <= noise_std_min <= noise_std_max:
            raise ValueError(
                f"need 0 <= noise_std_min <= noise_std_max, got {noise_std_min}, {noise_std_max}"
            )
        if not 0.0 <= noise_resample_prob <= 1.0:
            raise ValueError(f"noise_resample_prob must be in [0, 1], got {noise_resample_prob}")
        self.action_dim = action_dim
        self.noise_std_min = noise_std_min
        self.noise_std_max = noise_std_max
        self.noise_resample_prob = noise_resample_prob
        self.normalizer = RunningNormalizer(obs_dim)
        self.net = mlp(obs_dim, hidden, action_dim, activation)
        self.register_buffer("explore_uniform", torch.zeros(()))
        self._noise_std: torch.Tensor | None = None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action in [-1, 1], from raw observations."""
        return torch.tanh(self.net(self.normalizer(obs)))

    def _draw_std(self, n: int) -> torch.Tensor:
        span = self.noise_std_max - self.noise_std_min
        return self.noise_std_min + span * torch.rand(n, 1)

    @torch.no_grad()
    def rollout_actions(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rollout actions (noisy, or uniform during warm-up); the log-probability is 0."""
        batch_shape = obs.shape[:-1]
        logp = torch.zeros(batch_shape)
        if not deterministic and float(self.explore_uniform) > 0.5:
            return torch.rand(*batch_shape, self.action_dim) * 2.0 - 1.0, logp
        action = self.forward(obs)
        if deterministic:
            return action, logp
        flat = action.reshape(-1, self.action_dim)
        n = flat.shape[0]
        if self._noise_std is None or self._noise_std.shape[0] != n:
            self._noise_std = self._draw_std(n)
        else:
            redraw = torch.rand(n, 1) < self.noise_resample_prob
            self._noise_std = torch.where(redraw, self._draw_std(n), self._noise_std)
        noisy = flat + torch.randn_like(flat) * self._noise_std.to(flat.dtype)
        return noisy.clamp(-1.0, 1.0).reshape(action.shape), logp
