"""What the MLP actors share to implement `unilab.runtime.policy.Policy` (torch, H = 1).

Each actor reads one float32 vector group (``policy``) and returns a one-action chunk. It
keeps its flat-tensor methods (`forward`, `rollout_actions`) for the learners; the protocol
methods wrap them with the observation dict and the chunk axis.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from unilab.runtime.policy import ActionChunk
from unilab.runtime.torch_policy import PolicyModule


class VectorPolicy(PolicyModule):
    """Base of actors that read one observation vector and act one step at a time."""

    obs_group = "policy"
    action_horizon = 1
    action_dim: int

    @property
    def obs_groups(self) -> tuple[str, ...]:
        return (self.obs_group,)

    def rollout_actions(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, action_dim) actions and their (N,) log-probabilities from (N, obs_dim)."""
        raise NotImplementedError

    @torch.no_grad()
    def act(
        self, obs: Mapping[str, torch.Tensor], deterministic: bool = False
    ) -> ActionChunk[torch.Tensor]:
        action, logprob = self.rollout_actions(obs[self.obs_group], deterministic)
        return ActionChunk(action.unsqueeze(-2), logprob)

    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic (N, 1, action_dim): `forward` on the policy group."""
        out: torch.Tensor = self(obs[self.obs_group])
        return out.unsqueeze(-2)
