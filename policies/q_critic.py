"""Twin Q critics for SAC and TD3: scalar, or distributional (C51) behind `num_atoms > 1`.

Both critics live in one ensemble MLP whose layers hold a weight per member and run as
one batched matmul, so twin Q costs one network's worth of kernel launches (what bounds
small-MLP updates on a CPU). The critic takes observations that are already normalized
(the algorithm owns the normalizer, so online and target critics see the same inputs)
and actions in [-1, 1]. `forward` returns the raw heads of both critics stacked,
(2, B, atoms): Q values when scalar (atoms = 1), logits over the support when
distributional.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from unilab.policies.mlp import ACTIVATIONS


class EnsembleLinear(nn.Module):
    """`members` independent linear layers applied to (members, B, in) at once."""

    def __init__(self, members: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(members, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(members, 1, out_dim))
        # nn.Linear's default initialization, for each member.
        bound = 1.0 / math.sqrt(in_dim)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last dim with a separate scale and shift per member."""

    def __init__(self, members: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, 1, dim))
        self.bias = nn.Parameter(torch.zeros(members, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:]) * self.weight + self.bias


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
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
        self.num_atoms = num_atoms
        self.v_min, self.v_max = float(v_min), float(v_max)
        layers: list[nn.Module] = []
        last = obs_dim + action_dim
        for width in hidden:
            layers.append(EnsembleLinear(2, last, width))
            if layer_norm:
                layers.append(EnsembleLayerNorm(2, width))
            layers.append(ACTIVATIONS[activation]())
            last = width
        layers.append(EnsembleLinear(2, last, num_atoms))
        self.net = nn.Sequential(*layers)
        self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms))

    @property
    def distributional(self) -> bool:
        return self.num_atoms > 1

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        return self.net(x.unsqueeze(0).expand(2, *x.shape))

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
