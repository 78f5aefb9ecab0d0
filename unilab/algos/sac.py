"""SAC (FastSAC-style): many envs, a large replay store on the learner device, several
gradient steps per batch, twin Q with Polyak targets and automatic entropy tuning.

Per gradient step: critic TD step on clipped double-Q targets with the entropy bonus of
the next action; every `policy_frequency` steps an actor step (maximize min-Q minus
alpha * log pi) and, with `autotune`, an alpha step towards `target_entropy`; then the
targets move by `tau`. The replay store, warm-up and checkpoints are shared with TD3 (see
`unilab.algos.off_policy`); the replay store's contents are not checkpointed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from unilab.algos.off_policy import (
    OffPolicyAlgorithm,
    OffPolicyConfig,
    adamw,
    no_param_grads,
    soft_update,
)
from unilab.algos.registry import register_algo
from unilab.policies.squashed_gaussian import SquashedGaussianActor


@dataclass
class SACConfig(OffPolicyConfig):
    name: str = "sac"
    init_alpha: float = 0.01
    """Starting entropy temperature alpha (small: unilab rewards are per-step, times
    control_dt, so an entropy bonus of 0.1 would outweigh them)."""
    autotune: bool = True
    """Tune alpha so the policy's entropy tracks target_entropy."""
    alpha_lr: float = 3e-4
    """Learning rate of log(alpha) (Adam)."""
    target_entropy: float | None = None
    """Entropy the tuning aims for; None means -action_dim."""
    policy_frequency: int = 1
    """An actor (and alpha) step every this many critic steps."""
    log_std_min: float = -5.0
    """Lower bound of the actor's pre-squash log std."""
    log_std_max: float = 2.0
    """Upper bound of the actor's pre-squash log std."""


@register_algo("sac", SACConfig)
class SAC(OffPolicyAlgorithm):
    """Soft actor-critic (off-policy), device replay store, automatic entropy tuning."""

    cfg: SACConfig
    actor: SquashedGaussianActor

    def __init__(
        self, cfg: SACConfig, obs_dims: dict[str, int], action_dim: int, device: torch.device
    ) -> None:
        if cfg.init_alpha <= 0:
            raise ValueError(f"sac config: init_alpha must be positive, got {cfg.init_alpha}")
        if cfg.policy_frequency < 1:
            raise ValueError(
                f"sac config: policy_frequency must be at least 1, got {cfg.policy_frequency}"
            )
        super().__init__(cfg, obs_dims, action_dim, device)
        self.actor = self.build_actor(cfg, obs_dims, action_dim).to(device)
        self._setup_critic(self.actor.normalizer)
        self.actor_optimizer = adamw(
            self.actor.parameters(), cfg.actor_lr, cfg.weight_decay, device
        )
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), device=device, requires_grad=True)
        self.alpha_optimizer = adamw([self.log_alpha], cfg.alpha_lr, 0.0, device)
        self.target_entropy = (
            float(-action_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
        )

    @staticmethod
    def build_actor(cfg: Any, obs_dims: dict[str, int], action_dim: int) -> SquashedGaussianActor:
        return SquashedGaussianActor(
            obs_dims["policy"],
            action_dim,
            cfg.actor_hidden,
            cfg.activation,
            cfg.log_std_min,
            cfg.log_std_max,
        )

    def _gradient_step(self, rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_logp = self.actor.sample(rows["next_obs_policy"])
        critic_loss, q_mean = self._critic_loss(rows, next_action, -alpha * next_logp)
        self._step(self.critic_optimizer, critic_loss, self.critic)
        stats = {"critic_loss": critic_loss.detach(), "q_mean": q_mean, "alpha": alpha}

        if self.grad_steps % cfg.policy_frequency == 0:
            action, logp = self.actor.sample(rows["obs_policy"])
            with no_param_grads(self.critic):
                q = self.critic.q_values(self._critic_obs(rows, ""), action).min(0).values
            actor_loss = (alpha * logp - q).mean()
            self._step(self.actor_optimizer, actor_loss, self.actor)
            stats["actor_loss"] = actor_loss.detach()
            stats["entropy"] = -logp.detach().mean()
            if cfg.autotune:
                alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
                self.alpha_optimizer.zero_grad(set_to_none=True)
                alpha_loss.backward()
                self.alpha_optimizer.step()
        soft_update(self.critic_target, self.critic, cfg.tau)
        return stats

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = self._shared_state()
        state["actor_optimizer"] = self.actor_optimizer.state_dict()
        state["log_alpha"] = self.log_alpha.detach().clone()
        state["alpha_optimizer"] = self.alpha_optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_shared_state(state)
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
