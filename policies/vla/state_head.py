"""`StateHead`: an auxiliary head that predicts a training-time target (the privileged
object state the simulator knows: cube positions, orientations, which cube is named) from
the VLA's fused prefix.

Learning where the objects are from a behaviour-cloning loss alone is slow (the loss says
only which way the arm should move); regressing the object state from the same tokens
gives the image encoders a direct signal (asymmetric, privileged supervision). Nothing at
inference reads it: the export traces the action path only, and a store without the state
(real or imported data) trains without the term.
"""

from __future__ import annotations

import torch
from torch import nn

from unilab.policies.normalizer import RunningNormalizer
from unilab.policies.vla.prefix import Prefix


class StateHead(nn.Module):
    def __init__(self, width: int, state_dim: int) -> None:
        super().__init__()
        self.target_norm = RunningNormalizer(state_dim)
        self.net = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, width), nn.SiLU(), nn.Linear(width, state_dim)
        )

    def forward(self, prefix: Prefix) -> torch.Tensor:
        """(N, state_dim) prediction in normalized units from the mean of the valid tokens."""
        keep = prefix.valid.to(prefix.tokens.dtype)[..., None]
        pooled = (prefix.tokens * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        out: torch.Tensor = self.net(pooled)
        return out

    def loss(self, prefix: Prefix, state: torch.Tensor) -> torch.Tensor:
        """Mean squared error against `state` (N, state_dim) in task units, normalized."""
        target = self.target_norm(state.to(prefix.tokens.device, torch.float32))
        return (self(prefix) - target).square().mean()
