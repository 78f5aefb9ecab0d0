"""Twin Q critics for SAC and TD3: scalar, or distributional (C51) behind `num_atoms > 1`.

The critic takes observations that are already normalized (the algorithm owns the
normalizer, so online and target critics always see the same inputs) and actions in
[-1, 1]. `forward` returns the raw heads of both critics stacked, (2, B, atoms): Q values
when scalar (atoms = 1), logits over the fixed support when distributional.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from unilab.policies.mlp import mlp


class TwinQCritic(nn.Module):
    support: torch.Tensor

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        layer_norm: bool = False,
        num_atoms: int = 1,
        v_min: float = -10.0,
        v_max: float = 10.0,
    ) -> None:
        super().__init__()
        if num_atoms < 1:
            raise ValueError(f"num_atoms must be 1 (scalar Q) or more (C51), got {num_atoms}")
        if num_atoms > 1 and not v_min < v_max:
            raise ValueError(f"distributional critic needs v_min < v_max, got {v_min}, {v_max}")
        self.num_atoms = num_atoms
        self.v_min, self.v_max = float(v_min), float(v_max)
        self.q1 = mlp(obs_dim + action_dim, hidden, num_atoms, activation, layer_norm)
        self.q2 = mlp(obs_dim + action_dim, hidden, num_atoms, activation, layer_norm)
        self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms))

    @property
    def distributional(self) -> bool:
        return self.num_atoms > 1

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        return torch.stack([self.q1(x), self.q2(x)])

    def q_values(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Expected Q of both critics, (2, B)."""
        return self.expected(self.forward(obs, action))

    def expected(self, heads: torch.Tensor) -> torch.Tensor:
        """Heads (2, B, atoms) -> expected Q (2, B)."""
        if not self.distributional:
            return heads.squeeze(-1)
        return (heads.softmax(-1) * self.support).sum(-1)

    @torch.no_grad()
    def project(
        self, probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor
    ) -> torch.Tensor:
        """Project the distribution of `reward + discount * Z` onto the support (C51).

        probs: (B, atoms) of Z; reward, discount: (B,). Returns (B, atoms) target probs.
        """
        atoms = self.num_atoms
        delta = (self.v_max - self.v_min) / (atoms - 1)
        target = reward.unsqueeze(-1) + discount.unsqueeze(-1) * self.support
        pos = (target.clamp(self.v_min, self.v_max) - self.v_min) / delta
        lower = pos.floor().clamp(0, atoms - 1)
        upper = pos.ceil().clamp(0, atoms - 1)
        # Where pos falls on an atom, lower == upper and all the mass goes there.
        to_lower = probs * (upper - pos + (lower == upper).to(probs.dtype))
        to_upper = probs * (pos - lower)
        out = torch.zeros_like(probs)
        out.scatter_add_(-1, lower.long(), to_lower)
        out.scatter_add_(-1, upper.long(), to_upper)
        return out
