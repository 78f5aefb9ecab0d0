"""PPO: GAE, clipped surrogate, clipped value loss, entropy bonus, KL-adaptive learning rate.

Read top to bottom: config, networks, advantages, update. Time-outs are bootstrapped with
the critic's value of the pre-reset observation (`next_obs_<critic group>`), so only real
terminations cut the return.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from unilab.algos.base import Algorithm
from unilab.algos.registry import register_algo
from unilab.config.checks import checked
from unilab.config.schema import AlgoConfig
from unilab.policies.actor_critic import GaussianActor, ValueCritic


@dataclass
class PPOConfig(AlgoConfig):
    name: str = "ppo"
    lr: float = 1e-3
    """Adam learning rate (the starting point when schedule=adaptive)."""
    schedule: str = "adaptive"
    """adaptive: scale lr to keep the KL near desired_kl; fixed: keep lr."""
    desired_kl: float = 0.01
    """Target KL between the old and new policy per update (adaptive schedule)."""
    gamma: float = 0.99
    """Discount factor."""
    lam: float = 0.95
    """GAE lambda."""
    num_epochs: int = 5
    """Passes over each batch."""
    num_minibatches: int = 4
    """Minibatches per pass."""
    clip: float = 0.2
    """Surrogate clip range."""
    value_clip: float = 0.2
    """Value-loss clip range around the old value; 0 disables clipping."""
    value_coef: float = 1.0
    """Weight of the value loss."""
    entropy_coef: float = 0.005
    """Weight of the entropy bonus."""
    max_grad_norm: float = 1.0
    """Gradient norm clip."""
    actor_hidden: list[int] = field(default_factory=lambda: [256, 128, 64])
    """Hidden layer widths of the actor MLP."""
    critic_hidden: list[int] = field(default_factory=lambda: [256, 128, 64])
    """Hidden layer widths of the critic MLP."""
    activation: str = "elu"
    """Hidden activation: elu, relu, tanh, silu, gelu."""
    init_std: float = 1.0
    """Initial action standard deviation."""
    group_baseline: float = checked(0.0, ge=0, le=1)
    """With branching rollouts (runtime.branching_k > 1): weight of the group-relative
    advantage at each branch point, a sibling's return minus its siblings' mean (0: GAE
    only; 1: the group baseline alone there)."""


@register_algo("ppo", PPOConfig)
class PPO(Algorithm):
    """Proximal Policy Optimization (on-policy), synchronous batches."""

    supports_data_parallel = True

    def __init__(
        self, cfg: PPOConfig, obs_dims: dict[str, int], action_dim: int, device: torch.device
    ) -> None:
        super().__init__(cfg, obs_dims, action_dim, device)
        self.cfg: PPOConfig = cfg
        self.actor: GaussianActor = GaussianActor(
            obs_dims["policy"], action_dim, cfg.actor_hidden, cfg.activation, cfg.init_std
        ).to(device)
        self.critic = ValueCritic(
            obs_dims[self.critic_group], cfg.critic_hidden, cfg.activation
        ).to(device)
        self.optimizer = torch.optim.Adam(
            [*self.actor.parameters(), *self.critic.parameters()], lr=cfg.lr
        )
        self.lr = cfg.lr

    @staticmethod
    def build_actor(cfg: Any, obs_dims: dict[str, int], action_dim: int) -> GaussianActor:
        return GaussianActor(
            obs_dims["policy"], action_dim, cfg.actor_hidden, cfg.activation, cfg.init_std
        )

    # -- advantages -------------------------------------------------------------------------
    @torch.no_grad()
    def advantages(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """GAE over (T, N): returns (values, advantages, returns)."""
        group = self.critic_group
        values = self.critic(batch[f"obs_{group}"])
        next_values = self.critic(batch[f"next_obs_{group}"])
        reward, terminated = batch["reward"], batch["terminated"]
        done = torch.clamp(terminated + batch["truncated"], max=1.0)
        deltas = reward + self.cfg.gamma * (1.0 - terminated) * next_values - values
        adv = self._discounted(deltas, done, self.cfg.lam)
        returns = adv + values
        if self.cfg.group_baseline > 0 and "branch_point" in batch:
            full = self._discounted(deltas, done, 1.0)  # return-to-go minus V, in the chunk
            adv = group_relative(adv, full, batch["branch_point"], self.cfg.group_baseline)
        return values, adv, returns

    def _discounted(self, deltas: torch.Tensor, done: torch.Tensor, lam: float) -> torch.Tensor:
        adv = torch.zeros_like(deltas)
        running = torch.zeros_like(deltas[0])
        for t in range(deltas.shape[0] - 1, -1, -1):
            running = deltas[t] + self.cfg.gamma * lam * (1.0 - done[t]) * running
            adv[t] = running
        return adv

    # -- update -----------------------------------------------------------------------------
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self.update_normalizers(batch)
        return self.optimize(batch, batch["logprob"], sample_weight=None)

    def update_normalizers(self, batch: dict[str, torch.Tensor]) -> None:
        """Fold the batch's observations into the actor's and critic's normalizers (over
        the combined batch when data-parallel)."""
        for normalizer, group in (
            (self.actor.normalizer, "policy"),
            (self.critic.normalizer, self.critic_group),
        ):
            x = batch[f"obs_{group}"]
            if not self.data_parallel.active:
                normalizer.update(x)
                continue
            x = x.reshape(-1, x.shape[-1]).to(normalizer.mean.dtype)
            dp = self.data_parallel
            n = x.shape[0] * dp.world_size
            mean = dp.all_sum(x.sum(0)) / n
            var = dp.all_sum((x - mean).square().sum(0)) / n
            normalizer.update_from_moments(mean, var, n)

    def optimize(
        self,
        batch: dict[str, torch.Tensor],
        anchor_logprob: torch.Tensor,
        sample_weight: torch.Tensor | None,
        kl_logprob: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """The clipped PPO epochs. The ratio is taken against `anchor_logprob` (the behaviour
        policy for PPO; the proximal policy for APPO), and each sample's surrogate is scaled
        by `sample_weight` (APPO's importance weight), both (T, N)."""
        cfg = self.cfg
        values, adv, returns = self.advantages(batch)

        dp = self.data_parallel
        steps, local_envs = values.shape[0], values.shape[1]
        flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in batch.items()}
        old_values, adv, returns = values.reshape(-1), adv.reshape(-1), returns.reshape(-1)
        if dp.active:  # the combined batch's mean and (unbiased) std, summed over ranks
            n_all = adv.shape[0] * dp.world_size
            adv_mean = dp.all_sum(adv.sum()) / n_all
            adv_std = (dp.all_sum((adv - adv_mean).square().sum()) / (n_all - 1)).sqrt()
            adv = (adv - adv_mean) / (adv_std + 1e-8)
        else:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        is_weight = torch.ones_like(adv) if sample_weight is None else sample_weight.reshape(-1)
        anchor = anchor_logprob.reshape(-1)
        # The adaptive learning rate watches the KL to `kl_logprob` (default: the anchor).
        kl_ref = anchor if kl_logprob is None else kl_logprob.reshape(-1)
        n = adv.shape[0] * dp.world_size  # samples in the combined batch
        mb_size = max(1, n // cfg.num_minibatches)

        def mean(x: torch.Tensor) -> torch.Tensor:
            # Data-parallel: this rank's share of the combined minibatch's mean.
            return x.sum() / mb_size if dp.active else x.mean()

        stats: dict[str, float] = {
            "policy_loss": 0.0,
            "value_loss": 0.0,
            "entropy": 0.0,
            "kl": 0.0,
            "clip_frac": 0.0,
        }
        count = 0
        for _ in range(cfg.num_epochs):
            perm = torch.randperm(n, device=self.device)
            for start in range(0, n - mb_size + 1, mb_size):
                idx = dp.local_indices(perm[start : start + mb_size], steps, local_envs)
                dist = self.actor.distribution(flat["obs_policy"][idx])
                logp = dist.log_prob(flat["action"][idx]).sum(-1)
                log_ratio = logp - anchor[idx]
                ratio = log_ratio.exp()
                a = adv[idx]
                surrogate = torch.max(-a * ratio, -a * ratio.clamp(1 - cfg.clip, 1 + cfg.clip))
                policy_loss = mean(is_weight[idx] * surrogate)

                value = self.critic(flat[f"obs_{self.critic_group}"][idx])
                value_loss = (value - returns[idx]).square()
                if cfg.value_clip > 0:
                    clipped = old_values[idx] + (value - old_values[idx]).clamp(
                        -cfg.value_clip, cfg.value_clip
                    )
                    value_loss = torch.max(value_loss, (clipped - returns[idx]).square())
                value_loss = mean(value_loss)
                entropy = mean(dist.entropy().sum(-1))
                loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy

                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                params = [*self.actor.parameters(), *self.critic.parameters()]
                dp.sum_grads(params)
                nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                self.optimizer.step()

                with torch.no_grad():
                    log_kl = logp.detach() - kl_ref[idx]
                    kl = mean(log_kl.exp() - 1 - log_kl)  # low-variance KL estimator (Schulman)
                    clip_frac = mean(((ratio - 1).abs() > cfg.clip).float())
                    step_stats = torch.stack(
                        [policy_loss.detach(), value_loss.detach(), entropy.detach(), kl, clip_frac]
                    )
                    values_now = dp.all_sum(step_stats).tolist()  # one all-reduce per step
                    self._adapt_lr(values_now[3])
                    for key, value in zip(stats, values_now, strict=True):
                        stats[key] += value
                count += 1
        out = {k: v / max(count, 1) for k, v in stats.items()}
        out["lr"] = self.lr
        out["action_std"] = float(self.actor.log_std.detach().exp().mean())
        if dp.active:
            out["value_mean"] = float(dp.all_sum(old_values.sum()) / n)
        else:
            out["value_mean"] = float(old_values.mean())
        return out

    def _adapt_lr(self, kl: float) -> None:
        if self.cfg.schedule != "adaptive":
            return
        if kl > 2.0 * self.cfg.desired_kl:
            self.lr = max(1e-5, self.lr / 1.5)
        elif 0.0 < kl < 0.5 * self.cfg.desired_kl:
            self.lr = min(1e-2, self.lr * 1.5)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr": self.lr,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr = float(state["lr"])
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr


def group_relative(
    adv: torch.Tensor, full: torch.Tensor, branch_point: torch.Tensor, weight: float
) -> torch.Tensor:
    """At each branch point (the step after a group of k envs forked, `branch_point[t]` =
    k), blend each sibling's advantage with its return minus the group's mean return.
    Siblings share the state there, so V cancels and `full` (the lambda = 1 advantage)
    stands for the return. Groups are k consecutive envs starting at a multiple of k."""
    out = adv.clone()
    forked_steps = torch.nonzero(branch_point[:-1].amax(dim=1) > 0).flatten().tolist()
    for t in forked_steps:
        k = int(branch_point[t].max().item())
        envs = torch.nonzero(branch_point[t] > 0).flatten()
        g = full[t + 1, envs].reshape(-1, k)
        rel = (g - g.mean(dim=1, keepdim=True)).reshape(-1)
        out[t + 1, envs] = (1.0 - weight) * adv[t + 1, envs] + weight * rel
    return out
