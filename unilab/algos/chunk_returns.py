"""GAE over decisions, for learners whose actions are chunks executed over several env steps.

A chunked policy decides at some steps (`replanned` = 1: the env got a new chunk) and then
executes the chunk's actions for `n_act` steps, or fewer when the episode ends. One
decision is one macro step of a semi-Markov decision process: its return is the
discounted reward of the steps it ran, bootstrapped at its end

- with 0 when the episode terminated inside it;
- with V(next_obs) of the last step when the episode was truncated (time-out) inside it,
  or when the rollout window ends before the next decision (the chunk goes on in the next
  window; the value of the mid-chunk state stands in for it);
- with V(obs) of the next decision otherwise,

and GAE links a decision to the next one with gamma^m * lambda, m its number of steps,
only when its segment ended at that next decision (`decision_advantages`). Steps at the
start of a window that continue a chunk decided in an earlier window belong to no
decision here and are not learned from.

Inputs are (T, N) tensors; outputs are (T, N) with values only at decision steps (0 elsewhere).
"""

from __future__ import annotations

import torch


@torch.no_grad()
def decision_advantages(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    replanned: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(advantages, returns, steps) at the decision steps of (T, N) rollouts.

    `values[t]` = V(obs[t]); `next_values[t]` = V(next_obs[t]) (before any auto-reset).
    `steps` is each decision's number of executed steps m (0 at non-decision steps)."""
    horizon = reward.shape[0]
    term = terminated > 0.5
    trunc = truncated > 0.5
    decide = replanned > 0.5
    ret = torch.zeros_like(reward)  # bootstrapped return of the segment from t to its end
    disc = torch.zeros_like(reward)  # gamma^(steps from t to the segment's end)
    link = torch.zeros_like(reward)  # 1: the segment from t ends at the next decision
    steps = torch.zeros_like(reward)
    adv = torch.zeros_like(reward)
    carry = torch.zeros_like(reward[0])  # advantage of the next decision
    zero = torch.zeros_like(reward[0])
    for t in range(horizon - 1, -1, -1):
        last = t == horizon - 1
        next_decides = decide[t + 1] if not last else torch.zeros_like(decide[t])
        ends = term[t] | trunc[t] | next_decides | last
        boot_end = torch.where(
            term[t],
            zero,
            torch.where(trunc[t] | torch.full_like(trunc[t], last), next_values[t], zero),
        )
        if not last:
            boot_end = torch.where(~term[t] & ~trunc[t] & next_decides, values[t + 1], boot_end)
        going_on = ret[t + 1] if not last else zero
        ret[t] = reward[t] + gamma * torch.where(ends, boot_end, going_on)
        disc[t] = gamma * torch.where(
            ends, torch.ones_like(zero), disc[t + 1] if not last else zero
        )
        link_end = (next_decides & ~term[t] & ~trunc[t]).to(reward.dtype)
        link[t] = torch.where(ends, link_end, link[t + 1] if not last else zero)
        steps[t] = 1.0 + torch.where(ends, zero, steps[t + 1] if not last else zero)
        delta = ret[t] - values[t]
        here = delta + lam * disc[t] * link[t] * carry
        adv[t] = torch.where(decide[t], here, zero)
        carry = torch.where(decide[t], here, carry)
    mask = decide.to(reward.dtype)
    returns = (adv + values) * mask
    return adv, returns, steps * mask
