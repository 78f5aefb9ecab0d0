"""APPO: PPO made safe for asynchronous collection (decoupled PPO, as in AReaL).

In async mode a chunk may come from a policy a few versions old (the behaviour policy μ).
Plain PPO would clip the ratio π/μ, so the trust region moves with the data's age.
Decoupled PPO separates the two roles:

- the *proximal* policy π_prox is the learner's policy at the start of this update; the
  clipped ratio is π_θ / π_prox, so the trust region is always around the current policy;
- the off-policy correction is the importance weight π_prox / μ, truncated at
  `max_is_weight`, multiplying each sample's surrogate.

Chunks older than `max_staleness` versions never reach this update (the runtime drops and
counts them); the staleness of each batch is logged by the training loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from unilab.algos.ppo import PPO, PPOConfig
from unilab.algos.registry import register_algo


@dataclass
class APPOConfig(PPOConfig):
    name: str = "appo"
    max_staleness: int = 4
    """Chunks made by a policy more than this many versions old are dropped (and counted)."""
    max_is_weight: float = 2.0
    """Truncation of the importance weight π_prox / μ (as in V-trace's c̄)."""


@register_algo("appo", APPOConfig)
class APPO(PPO):
    """Asynchronous PPO: decoupled PPO loss with truncated importance weights, staleness-bounded."""

    cfg: APPOConfig

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        # π_prox is the policy as this update finds it, normalizer included: with fresh data
        # (sync mode) it equals the behaviour policy, every weight is 1 and APPO is PPO.
        with torch.no_grad():
            dist = self.actor.distribution(batch["obs_policy"])
            prox_logprob = dist.log_prob(batch["action"]).sum(-1)
            log_w = prox_logprob - batch["logprob"]
            weight = log_w.exp().clamp(max=self.cfg.max_is_weight)
        self.update_normalizers(batch)
        metrics = self.optimize(batch, prox_logprob, sample_weight=weight)
        metrics["is_weight_mean"] = float(weight.mean())
        metrics["is_weight_truncated"] = float(
            (log_w.exp() > self.cfg.max_is_weight).float().mean()
        )
        return metrics
