"""Training side of a `VLAPolicy`: the statistics fitted from data, the loss and the value
heads' predictions.

`fit_policy_normalizers(policy, ...)` is what `VLAPolicy.fit_normalizers()` does (the
proprioception, action and state-head target statistics, the value heads' time scale);
`policy_loss(policy, ...)` is what `VLAPolicy.loss()` returns: the action loss of the head
(`action_loss`: flow matching, or the MSE head's regression and std terms) plus the
weighted state-head and value-head losses. `predict_policy_values(policy, obs)` is what
`VLAPolicy.predict_values()` returns; `require_value_heads` gives the value heads or a
ValueError naming the switch; `value_heads_loss` is the heads' loss on a batch of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from unilab.policies.normalizer import RunningNormalizer
from unilab.policies.vla.flow import interpolate, sample_time
from unilab.policies.vla.prefix import Prefix
from unilab.policies.vla.value_heads import ValueHeads, ValueTargets

if TYPE_CHECKING:
    from unilab.policies.vla.policy import VLAPolicy


@torch.no_grad()
def refit(norm: RunningNormalizer, rows: torch.Tensor) -> None:
    """Reset a `RunningNormalizer` and fit it to `rows` (n, d)."""
    norm.mean.zero_()
    norm.var.fill_(1.0)
    norm.count.zero_()
    norm.update(rows.to(norm.mean.device, torch.float32))


@torch.no_grad()
def fit_policy_normalizers(
    policy: VLAPolicy,
    proprio: torch.Tensor | None,
    actions: torch.Tensor,
    state: torch.Tensor | None = None,
    value_targets: ValueTargets | None = None,
) -> None:
    """Set `policy`'s proprioception, action (and state-head target) statistics from
    training data (rows, d), and the value heads' time scale from `value_targets`."""
    if proprio is not None and policy.inputs.proprio_dim:
        refit(policy.prefix.proprio_norm, proprio)
    policy.action_norm.fit(actions.to(policy.device, torch.float32))
    if state is not None and policy.state_head is not None:
        refit(policy.state_head.target_norm, state)
    if value_targets is not None and policy.value_heads is not None:
        policy.value_heads.fit_time_scale(value_targets.time_to_go, value_targets.has_progress)


def policy_loss(
    policy: VLAPolicy,
    obs: Mapping[str, torch.Tensor],
    actions: torch.Tensor,
    is_pad: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    drop_conditions: bool = True,
    state: torch.Tensor | None = None,
    state_weight: float = 0.0,
    value_targets: ValueTargets | None = None,
    value_weight: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Training loss on chunks `actions` (N, H, A) in task units; padded rows (`is_pad`
    (N, H) True) do not count. Conditions are dropped to null at their dropout rates
    (`drop_conditions`, in training mode). With a state head and `state` (N, d), adds
    `state_weight` x its error (normalized units). With `value_targets`, adds `value_weight`
    x the sum of the value heads' losses (metrics `success_loss`, `progress_loss`,
    `ttg_loss`). -> (scalar loss, detached metrics)."""
    prefix = policy.encode(obs, drop=drop_conditions and policy.training, generator=generator)
    loss, metrics = action_loss(policy, prefix, actions, is_pad, generator)
    if state is not None and policy.state_head is not None:
        state_loss = policy.state_head.loss(prefix, state)
        metrics["state_loss"] = state_loss.detach()
        loss = loss + state_weight * state_loss
    if value_targets is not None:
        terms = require_value_heads(policy).loss(prefix, value_targets)
        metrics.update({k: v.detach() for k, v in terms.items()})
        loss = loss + value_weight * sum(terms.values(), torch.zeros((), device=loss.device))
    return loss, metrics


def value_heads_loss(
    policy: VLAPolicy, obs: Mapping[str, torch.Tensor], targets: ValueTargets
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The value heads' summed losses on a batch of their own (no action loss, no condition
    dropped): for learners whose action batch is not drawn uniformly (`awr_flow`), so the
    heads still learn outcome frequencies. -> (scalar loss, detached metrics)."""
    terms = require_value_heads(policy).loss(policy.encode(obs), targets)
    loss = sum(terms.values(), torch.zeros((), device=policy.device))
    return loss, {k: v.detach() for k, v in terms.items()}


def require_value_heads(policy: VLAPolicy) -> ValueHeads:
    """`policy`'s value heads; a ValueError naming the switch if it has none."""
    if policy.value_heads is None:
        raise ValueError(
            "this VLA has no value heads: build it with VLAConfig(value_heads=True) "
            "(algo.value_weight > 0 does so)"
        )
    return policy.value_heads


@torch.no_grad()
def predict_policy_values(
    policy: VLAPolicy, obs: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The value heads' predictions for `obs` (no conditions dropped): {"success":
    P(success) (calibrated), "success_logit" (raw), "progress": in [0, 1], "time_to_go":
    seconds}, each (N,)."""
    heads = require_value_heads(policy)
    policy.check_obs(obs)
    present = {k: v for k, v in policy._to_device(obs).items() if k in policy.obs_groups}
    return heads.predict(policy.encode(present))


def action_loss(
    policy: VLAPolicy,
    prefix: Prefix,
    actions: torch.Tensor,
    is_pad: torch.Tensor | None,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The head's loss on `actions` (N, H, A) in task units over the unpadded rows: flow
    matching (metric `flow_loss`; noise and times drawn from `generator`) or the MSE head's
    squared error plus its std NLL (`mse_loss`, `std_nll`), in normalized units."""
    target = policy.action_norm.normalize(actions.to(torch.float32))
    n = target.shape[0]
    keep = (
        torch.ones(target.shape[:2], device=target.device)
        if is_pad is None
        else (~is_pad.to(torch.bool)).to(torch.float32)
    )
    weight = keep[..., None].expand_as(target)
    denom = weight.sum().clamp_min(1.0)
    ctx = policy._head_context(prefix)
    if policy.expert is not None:
        noise = torch.randn(target.shape, generator=generator, device="cpu").to(target.device)
        t = sample_time(n, target.device, generator)
        x_t, u = interpolate(target, noise, t)
        v, _ = policy.expert(ctx, x_t, t)
        loss = ((v - u).square() * weight).sum() / denom
        return loss, {"flow_loss": loss.detach()}
    sq, nll = policy._gaussian().loss_terms(ctx, target)
    mse = (sq * weight).sum() / denom
    nll_mean = (nll * weight).sum() / denom
    return mse + nll_mean, {"mse_loss": mse.detach(), "std_nll": nll_mean.detach()}
