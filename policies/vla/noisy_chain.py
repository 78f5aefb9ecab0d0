"""Noisy K-step chains of a `VLAPolicy` with exact log-probabilities, for RL (flow_ppo).

With `cfg.flow_noise` the policy's noise head gives every Euler step a learned Gaussian
noise (`flow_noise`), so a sampled chain x_0 -> ... -> x_K has an exact log-probability.
`sample_noisy_chain(policy, ...)` is what `VLAPolicy.sample_chain()` returns (the rollout
side: one step per grid point); `noisy_chain_log_prob(policy, ...)` is what
`VLAPolicy.chain_log_prob()` returns (the learner side: all K steps of stored chains in one
differentiable batch). The step functions pair the action expert's velocity with the
noise head's log-std (`chain_step_fn`, `chain_batch_step_fn`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from unilab.policies.vla.action_expert import ExpertContext
from unilab.policies.vla.flow import time_grid
from unilab.policies.vla.flow_noise import Chain, NoiseHead, chain_log_prob, sample_chain

if TYPE_CHECKING:
    from unilab.policies.vla.policy import VLAPolicy


def require_noise_head(policy: VLAPolicy) -> NoiseHead:
    """`policy`'s noise head; a ValueError if it has none."""
    if policy.noise_head is None:
        raise ValueError("log-probabilities of flow chains need cfg.flow_noise=True")
    return policy.noise_head


def chain_step_fn(
    policy: VLAPolicy, ctx: ExpertContext
) -> Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]:
    """(x, k) -> (velocity, noise log-std) at grid step k (the sampling side)."""
    expert, head = policy._expert(), require_noise_head(policy)
    mods = expert.step_modulations(ctx, time_grid(policy.num_steps, policy.device)[:-1])

    def step(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        v, hidden = expert.run(ctx, mods[k], x)
        return v, head(hidden)

    return step


def chain_batch_step_fn(
    policy: VLAPolicy, ctx: ExpertContext
) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """(x, t) -> (velocity, noise log-std) at per-row times t (all steps in one batch)."""
    expert, head = policy._expert(), require_noise_head(policy)

    def step(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v, hidden = expert(ctx, x, t)
        return v, head(hidden)

    return step


def sample_noisy_chain(
    policy: VLAPolicy,
    obs: Mapping[str, torch.Tensor],
    noise: torch.Tensor | None = None,
    step_noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Chain:
    """A stochastic K-step chain (normalized units) with its exact log-probability."""
    n = next(iter(obs.values())).shape[0]
    x0 = policy.draw_noise(n, generator) if noise is None else noise
    ctx = policy.context(obs)
    return sample_chain(chain_step_fn(policy, ctx), x0, policy.num_steps, step_noise, generator)


def noisy_chain_log_prob(
    policy: VLAPolicy, obs: Mapping[str, torch.Tensor], states: torch.Tensor
) -> torch.Tensor:
    """(N, H) log-probability of stored chains (N, K + 1, H, A) under the current
    parameters (differentiable: the PPO ratio's numerator)."""
    k = states.shape[1] - 1
    if k != policy.num_steps:
        raise ValueError(f"chains have {k} steps; this policy integrates {policy.num_steps}")
    ctx = policy.context(obs).repeat(k)
    return chain_log_prob(chain_batch_step_fn(policy, ctx), states)
