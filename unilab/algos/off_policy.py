"""What SAC and TD3 share: the replay store, normalizers, warm-up, targets, checkpoints.

`update(batch)` is the same for both: count the env steps, update the observation
normalizers from the new batch, turn it into (n-step) rows in the replay store, switch the
actor's uniform warm-up exploration off once `learning_starts` env steps have been
collected, and run `updates_per_batch` gradient steps (`_gradient_step`, per algorithm)
once the store holds `learning_starts` rows. The store keeps raw observations and every
network normalizes at use, so the statistics can keep moving.

Checkpoints hold networks, targets, optimizers, normalizers and counters; the replay
store's contents are not saved (they are large and cheap to regather). After a resume,
learning pauses until the store again holds `learning_starts` rows, without uniform
exploration.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from unilab.algos.base import Algorithm
from unilab.algos.replay import ReplayStore, row_specs, transition_rows
from unilab.config.schema import AlgoConfig
from unilab.policies.deterministic_actor import DeterministicActor
from unilab.policies.normalizer import RunningNormalizer
from unilab.policies.q_critic import TwinQCritic
from unilab.policies.squashed_gaussian import SquashedGaussianActor

ModuleT = TypeVar("ModuleT", bound=nn.Module)


@dataclass
class OffPolicyConfig(AlgoConfig):
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.05
    """Polyak factor of the target networks per gradient step (1 copies outright)."""
    batch_size: int = 256
    """Transitions sampled from the replay store per gradient step."""
    buffer_size: int = 1_000_000
    """Replay store capacity in transitions (all envs together); the oldest are overwritten."""
    learning_starts: int = 1000
    """Env steps of uniform random actions before the policy acts, and replay rows needed
    before gradient steps start."""
    updates_per_batch: int = 32
    """Gradient steps per batch from the runtime (runtime.chunk_len x sim.num_envs env steps)."""
    nstep: int = 3
    """n-step returns, computed inside each batch (windows stop at episode ends)."""
    actor_lr: float = 3e-4
    """Actor learning rate (AdamW)."""
    critic_lr: float = 3e-4
    """Critic learning rate (AdamW)."""
    weight_decay: float = 0.0
    """AdamW weight decay of actor and critic (0: plain Adam)."""
    max_grad_norm: float = 0.0
    """Gradient norm clip for actor and critic; 0 disables clipping."""
    actor_hidden: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the actor MLP."""
    critic_hidden: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of each Q network."""
    activation: str = "relu"
    """Hidden activation: elu, relu, tanh, silu, gelu."""
    critic_layer_norm: bool = False
    """LayerNorm after each hidden layer of the Q networks."""
    num_atoms: int = 1
    """1: scalar twin Q; more: distributional (C51) critics over [v_min, v_max]."""
    v_min: float = -10.0
    """Lowest return of the distributional critic's support."""
    v_max: float = 10.0
    """Highest return of the distributional critic's support."""
    normalize_obs: bool = True
    """Keep running observation statistics (inside the actor, exported with it)."""


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak-average parameters into `target`; copy buffers (normalizer statistics) outright."""
    with torch.no_grad():
        t_params: list[torch.Tensor] = list(target.parameters())
        s_params: list[torch.Tensor] = list(source.parameters())
        if tau >= 1.0:
            torch._foreach_copy_(t_params, s_params)
        else:
            torch._foreach_lerp_(t_params, s_params, tau)
        for t_buf, s_buf in zip(target.buffers(), source.buffers(), strict=True):
            t_buf.copy_(s_buf)


def adamw(
    params: Iterable[torch.Tensor], lr: float, weight_decay: float, device: torch.device
) -> torch.optim.AdamW:
    """AdamW, fused where torch has a fused kernel: the per-parameter Python loop of the
    plain implementation costs more than a small MLP's whole backward pass."""
    fused = True if device.type in ("cpu", "cuda") else None
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused)


@contextmanager
def no_param_grads(module: nn.Module) -> Iterator[None]:
    """Gradients flow through `module` to its inputs but not into its parameters (the actor
    step backpropagates through the critic; skipping the critic's weight gradients saves
    their matmuls)."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def frozen_copy(module: ModuleT) -> ModuleT:
    """A gradient-free copy of `module` to serve as its target network."""
    import copy

    target = copy.deepcopy(module)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


class OffPolicyAlgorithm(Algorithm):
    """Base of replay-based learners; subclasses build `actor` then call `_setup_critic`."""

    off_policy: ClassVar[bool] = True
    next_obs_groups: ClassVar[tuple[str, ...]] = ("policy", "critic")
    uses_logprob: ClassVar[bool] = False

    cfg: OffPolicyConfig
    actor: SquashedGaussianActor | DeterministicActor

    def __init__(
        self,
        cfg: OffPolicyConfig,
        obs_dims: dict[str, int],
        action_dim: int,
        device: torch.device,
    ) -> None:
        super().__init__(cfg, obs_dims, action_dim, device)
        _check_config(cfg)
        self.obs_groups = tuple(dict.fromkeys(("policy", self.critic_group)))
        self.replay = ReplayStore(
            cfg.buffer_size, row_specs(obs_dims, self.obs_groups, action_dim), device
        )
        self.env_steps = 0
        self.grad_steps = 0

    def _setup_critic(self, actor_normalizer: RunningNormalizer) -> None:
        cfg = self.cfg
        # With no separate critic group the critic reads the policy observations through the
        # actor's normalizer; otherwise it gets its own.
        self.critic_normalizer = (
            actor_normalizer
            if self.critic_group == "policy"
            else RunningNormalizer(self.obs_dims[self.critic_group]).to(self.device)
        )
        self.critic = TwinQCritic(
            self.obs_dims[self.critic_group],
            self.action_dim,
            cfg.critic_hidden,
            cfg.activation,
            cfg.critic_layer_norm,
            cfg.num_atoms,
            cfg.v_min,
            cfg.v_max,
        ).to(self.device)
        self.critic_target = frozen_copy(self.critic)
        self.critic_optimizer = adamw(
            self.critic.parameters(), cfg.critic_lr, cfg.weight_decay, self.device
        )
        self._set_uniform_exploration()

    # -- per algorithm ----------------------------------------------------------------------
    def _gradient_step(self, rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient step on sampled rows; returns 0-dim metric tensors (no host syncs)."""
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.cfg
        horizon, num_envs = batch["reward"].shape[:2]
        self.env_steps += horizon * num_envs
        if cfg.normalize_obs:
            self.actor.normalizer.update(batch["obs_policy"])
            if self.critic_normalizer is not self.actor.normalizer:
                self.critic_normalizer.update(batch[f"obs_{self.critic_group}"])
        self.replay.add(transition_rows(batch, self.obs_groups, cfg.gamma, cfg.nstep))
        self._set_uniform_exploration()

        sums: dict[str, torch.Tensor] = {}
        counts: dict[str, int] = {}
        if self.replay.size >= self._rows_before_learning():
            for _ in range(cfg.updates_per_batch):
                stats = self._gradient_step(self.replay.sample(cfg.batch_size))
                self.grad_steps += 1
                for key, value in stats.items():
                    sums[key] = sums[key] + value.detach() if key in sums else value.detach()
                    counts[key] = counts.get(key, 0) + 1
        # Metrics are means over the steps that produced them (actor steps may be delayed).
        out = {key: float(value) / counts[key] for key, value in sums.items()}
        out["replay_size"] = float(self.replay.size)
        out["grad_steps"] = float(self.grad_steps)
        out["explore_uniform"] = float(self.actor.explore_uniform)
        return out

    def _rows_before_learning(self) -> int:
        return max(1, min(self.cfg.learning_starts, self.cfg.buffer_size))

    def _set_uniform_exploration(self) -> None:
        flag = 1.0 if self.env_steps < self.cfg.learning_starts else 0.0
        self.actor.explore_uniform.fill_(flag)

    def _step(
        self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, module: nn.Module
    ) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(module.parameters(), self.cfg.max_grad_norm)
        optimizer.step()

    def _critic_obs(self, rows: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
        return self.critic_normalizer(rows[f"{prefix}obs_{self.critic_group}"])

    def _critic_loss(
        self,
        rows: dict[str, torch.Tensor],
        next_action: torch.Tensor,
        next_bonus: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Clipped double-Q TD loss; `next_bonus` (B,) is added to the next state's value
        (SAC's -alpha * log pi). Returns (loss, mean online Q)."""
        reward, discount = rows["reward"], rows["discount"]
        obs_c = self._critic_obs(rows, "")
        with torch.no_grad():
            next_obs_c = self._critic_obs(rows, "next_")
            target_heads = self.critic_target(next_obs_c, next_action)
            if self.critic.distributional:
                # Both target distributions exist; take, per row, the one with the lower mean.
                target_q = self.critic_target.expected(target_heads)
                pick = (target_q[1] < target_q[0]).long()
                probs = target_heads.softmax(-1)
                chosen = probs.gather(0, pick.view(1, -1, 1).expand(1, *probs.shape[1:]))[0]
                shift = reward if next_bonus is None else reward + discount * next_bonus
                target_probs = self.critic.project(chosen, shift, discount)
            else:
                next_q = self.critic_target.expected(target_heads).min(0).values
                if next_bonus is not None:
                    next_q = next_q + next_bonus
                target = reward + discount * next_q
        heads = self.critic(obs_c, rows["action"])
        if self.critic.distributional:
            log_probs = heads.log_softmax(-1)
            loss = -(target_probs.unsqueeze(0) * log_probs).sum(-1).mean(-1).sum()
        else:
            loss = (heads.squeeze(-1) - target.unsqueeze(0)).square().mean(-1).sum()
        q_mean = self.critic.expected(heads.detach()).mean()
        return loss, q_mean

    def _shared_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "env_steps": self.env_steps,
            "grad_steps": self.grad_steps,
        }
        if self.critic_normalizer is not self.actor.normalizer:
            state["critic_normalizer"] = self.critic_normalizer.state_dict()
        return state

    def _load_shared_state(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        if "critic_normalizer" in state:
            self.critic_normalizer.load_state_dict(state["critic_normalizer"])
        self.env_steps = int(state["env_steps"])
        self.grad_steps = int(state["grad_steps"])
        self._set_uniform_exploration()


def _check_config(cfg: OffPolicyConfig) -> None:
    problems = []
    if not 0.0 < cfg.gamma <= 1.0:
        problems.append(f"gamma must be in (0, 1], got {cfg.gamma}")
    if not 0.0 < cfg.tau <= 1.0:
        problems.append(f"tau must be in (0, 1], got {cfg.tau}")
    for name in ("batch_size", "buffer_size", "nstep"):
        if getattr(cfg, name) < 1:
            problems.append(f"{name} must be at least 1, got {getattr(cfg, name)}")
    for name in ("learning_starts", "updates_per_batch", "max_grad_norm", "weight_decay"):
        if getattr(cfg, name) < 0:
            problems.append(f"{name} must not be negative, got {getattr(cfg, name)}")
    if problems:
        raise ValueError(f"{cfg.name} config: " + "; ".join(problems))
