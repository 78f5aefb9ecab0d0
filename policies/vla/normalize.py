"""Action normalization inside the policy (so export carries it): the model works in
per-dimension standardized units; statistics are fitted once from the training data."""

from __future__ import annotations

import torch
from torch import nn

STD_FLOOR = 1e-2
"""A dimension that barely moves in the data (a held gripper) is not blown up."""


class ActionNormalizer(nn.Module):
    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, action_dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(action_dim))
        self.register_buffer("std", torch.ones(action_dim))

    @torch.no_grad()
    def fit(self, actions: torch.Tensor) -> None:
        """Statistics of (..., A) actions (padded chunk rows should be left out)."""
        flat = actions.reshape(-1, actions.shape[-1]).to(torch.float64)
        self.mean.copy_(flat.mean(0).to(self.mean.dtype))
        self.std.copy_(flat.std(0, unbiased=False).clamp_min(STD_FLOOR).to(self.std.dtype))

    def normalize(self, actions: torch.Tensor) -> torch.Tensor:
        return (actions - self.mean) / self.std

    def unnormalize(self, actions: torch.Tensor) -> torch.Tensor:
        return actions * self.std + self.mean
