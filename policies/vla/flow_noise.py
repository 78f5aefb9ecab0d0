"""Stochastic K-step chains with exact log-probabilities (ReinFlow / flow-noise style), for
RL fine-tuning of the flow policy.

Sampling starts at x_0 ~ N(0, I) (flow time t = 1) and takes K steps on the one grid
`flow.time_grid(K)`: mean_k = x_k + dt * v(x_k, t_k), x_{k+1} = mean_k + sigma_k * eps_k,
with sigma_k from a small noise head, bounded in [std_min, std_max] by a tanh (ReinFlow maps
a tanh-squashed log-variance into a range the same way). The chain is then a Gaussian
policy over its states:

    log p(chain) = log N(x_0; 0, I) + sum_k log N(x_{k+1}; mean_k, sigma_k^2)

Both sampling and recomputation (under new parameters, for the PPO ratio) use the same
grid, so a freshly sampled chain recomputes to the log-probability it was sampled with.
Nothing is clamped inside the chain (a clamp would break the density); the executed action
is x_K, in normalized action units. Log-probabilities are kept per action row (N, H),
summed over chain steps and action dims, so a learner can keep only the executed rows; the
chain's total is their sum. ReinFlow additionally divides by steps and action size and
clamps; that is the learner's business, not this module's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from unilab.policies.vla.flow import time_grid

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

StepFn = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]
"""(x (N, H, A), step index k on `time_grid(K)`) -> (velocity, log std), both (N, H, A)."""
BatchStepFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""(x (B, H, A), t (B,)) -> (velocity, log std): any rows at any grid times."""


class NoiseHead(nn.Module):
    """Action-expert hidden state (N, H, W) -> per-element log std, bounded to
    [log std_min, log std_max]; starts in the middle of the range."""

    def __init__(self, width: int, action_dim: int, std_min: float, std_max: float) -> None:
        super().__init__()
        self.log_min = math.log(std_min)
        self.log_max = math.log(std_max)
        self.net = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, action_dim))
        last = self.net[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        unit = 0.5 * (torch.tanh(self.net(hidden)) + 1.0)
        return self.log_min + (self.log_max - self.log_min) * unit


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(x; mean, exp(log_std)^2)."""
    z = (x - mean) * torch.exp(-log_std)
    return -0.5 * z.square() - log_std - HALF_LOG_2PI


@dataclass
class Chain:
    states: torch.Tensor
    """(N, K + 1, H, A): x_0 (noise at t = 1) ... x_K (the actions), normalized units."""
    log_prob: torch.Tensor
    """(N, H) log-probability of the chain, per action row; `.sum(-1)` is the chain's."""

    @property
    def actions(self) -> torch.Tensor:
        return self.states[:, -1]


def sample_chain(
    step: StepFn,
    noise: torch.Tensor,
    num_steps: int,
    step_noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Chain:
    """Sample a chain from x_0 = `noise` (N, H, A). `step_noise` (N, K, H, A) gives the
    standard-normal draws of every step (for reproducible chains); else they are drawn."""
    n, k = noise.shape[0], num_steps
    if step_noise is None:
        step_noise = torch.randn((n, k, *noise.shape[1:]), generator=generator, device="cpu")
        step_noise = step_noise.to(noise.device, noise.dtype)
    dt = -1.0 / k
    x = noise
    states = [x]
    logp = gaussian_log_prob(x, torch.zeros_like(x), torch.zeros_like(x))
    for i in range(k):
        v, log_std = step(x, i)
        mean = x + dt * v
        x = mean + torch.exp(log_std) * step_noise[:, i]
        logp = logp + gaussian_log_prob(x, mean, log_std)
        states.append(x)
    return Chain(torch.stack(states, dim=1), logp.sum(-1))


def chain_log_prob(step: BatchStepFn, states: torch.Tensor) -> torch.Tensor:
    """(N, H) log-probability of stored chains `states` (N, K + 1, H, A) under the current
    parameters. All K steps run as one batch: `step` gets K*N rows, step-major (rows
    k*N .. k*N + N - 1 are step k), so its context must be repeated K times step-major."""
    n, k1 = states.shape[:2]
    k = k1 - 1
    grid = time_grid(k, states.device)
    x = states[:, :-1].transpose(0, 1).reshape(k * n, *states.shape[2:])
    t = grid[:-1].repeat_interleave(n)
    v, log_std = step(x, t)
    mean = x + (-1.0 / k) * v
    nxt = states[:, 1:].transpose(0, 1).reshape(k * n, *states.shape[2:])
    steps = gaussian_log_prob(nxt, mean, log_std).reshape(k, n, *states.shape[2:])
    x0 = states[:, 0]
    first = gaussian_log_prob(x0, torch.zeros_like(x0), torch.zeros_like(x0))
    return (first + steps.sum(0)).sum(-1)
