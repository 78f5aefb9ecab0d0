"""TD3 (FastTD3-style): many envs, a large replay store on the learner device, several
gradient steps per batch, twin Q with target policy smoothing and delayed actor updates.

Per gradient step: critic TD step on clipped double-Q targets, where the target action is
the target actor's plus clipped Gaussian noise (`policy_noise`, `noise_clip`); every
`policy_delay` steps an actor step (maximize the mean of the twin Qs) and a Polyak move of
the target actor; the target critic moves every step. Workers explore with per-env noise
scales in [noise_std_min, noise_std_max] (see `DeterministicActor`). The replay store,
warm-up and checkpoints are shared with SAC (see `unilab.algos.off_policy`); the replay
store's contents are not checkpointed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from unilab.algos.off_policy import (
    OffPolicyAlgorithm,
    OffPolicyConfig,
    adamw,
    frozen_copy,
    no_param_grads,
    soft_update,
)
from unilab.algos.registry import register_algo
from unilab.policies.deterministic_actor import DeterministicActor


@dataclass
class TD3Config(OffPolicyConfig):
    name: str = "td3"
    policy_noise: float = 0.2
    """Std of the smoothing noise on target actions."""
    noise_clip: float = 0.5
    """Smoothing noise is clipped to [-noise_clip, noise_clip]."""
    policy_delay: int = 2
    """An actor step (and target actor move) every this many critic steps."""
    noise_std_min: float = 0.1
    """Smallest per-env exploration noise std of the workers' actions."""
    noise_std_max: float = 0.4
    """Largest per-env exploration noise std (equal to the min: one fixed scale)."""
    noise_resample_prob: float = 0.01
    """Chance per step that an env draws a new exploration noise scale."""


@register_algo("td3", TD3Config)
class TD3(OffPolicyAlgorithm):
    """Twin delayed DDPG (off-policy), device replay store, per-env exploration noise."""

    cfg: TD3Config
    actor: DeterministicActor

    def __init__(
        self, cfg: TD3Config, obs_dims: dict[str, int], action_dim: int, device: torch.device
    ) -> None:
        if cfg.policy_delay < 1:
            raise ValueError(f"td3 config: policy_delay must be at least 1, got {cfg.policy_delay}")
        if cfg.policy_noise < 0 or cfg.noise_clip < 0:
            raise ValueError(
                f"td3 config: policy_noise ({cfg.policy_noise}) and noise_clip "
                f"({cfg.noise_clip}) must not be negative"
            )
        super().__init__(cfg, obs_dims, action_dim, device)
        self.actor = self.build_actor(cfg, obs_dims, action_dim).to(device)
        self.actor_target = frozen_copy(self.actor)
        # The target actor reads observations through the online normalizer, so both always
        # use the same statistics (they change once per batch, before the gradient steps).
        self.actor_target.normalizer = self.actor.normalizer
        self._setup_critic(self.actor.normalizer)
        self.actor_optimizer = adamw(
            self.actor.parameters(), cfg.actor_lr, cfg.weight_decay, device
        )

    @staticmethod
    def build_actor(cfg: Any, obs_dims: dict[str, int], action_dim: int) -> DeterministicActor:
        return DeterministicActor(
            obs_dims["policy"],
            action_dim,
            cfg.actor_hidden,
            cfg.activation,
            cfg.noise_std_min,
            cfg.noise_std_max,
            cfg.noise_resample_prob,
        )

    def _gradient_step(self, rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        with torch.no_grad():
            next_action = self.actor_target(rows["next_obs_policy"])
            noise = (torch.randn_like(next_action) * cfg.policy_noise).clamp(
                -cfg.noise_clip, cfg.noise_clip
            )
            next_action = (next_action + noise).clamp(-1.0, 1.0)
        critic_loss, q_mean = self._critic_loss(rows, next_action, None)
        self._step(self.critic_optimizer, critic_loss, self.critic)
        stats = {"critic_loss": critic_loss.detach(), "q_mean": q_mean}

        if self.grad_steps % cfg.policy_delay == 0:
            action = self.actor(rows["obs_policy"])
            with no_param_grads(self.critic):
                q = self.critic.q_values(self._critic_obs(rows, ""), action)
            actor_loss = -q.mean()
            self._step(self.actor_optimizer, actor_loss, self.actor)
            stats["actor_loss"] = actor_loss.detach()
            soft_update(self.actor_target, self.actor, cfg.tau)
        soft_update(self.critic_target, self.critic, cfg.tau)
        return stats

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = self._shared_state()
        state["actor_target"] = self.actor_target.state_dict()
        state["actor_optimizer"] = self.actor_optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_shared_state(state)
        self.actor_target.load_state_dict(state["actor_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
