"""Optional conditions: a discrete behaviour token and a binary advantage indicator.

Each is a learned embedding table with one extra row for the null value, zero-initialised,
so a fresh model acts the same for every value (it starts as the unconditional policy).
Each condition enters twice: as one prefix token (the fusion transformer sees it) and as a
FiLM vector added to the action expert's adaptive-norm conditioning. Inputs use -1 for
null (the store's `token` column defaults to -1); during training a value is replaced by
null with the configured dropout probability, which keeps the null path trained for
classifier-free guidance.
"""

from __future__ import annotations

import torch
from torch import nn


class Condition(nn.Module):
    def __init__(self, num_values: int, width: int, dropout: float) -> None:
        super().__init__()
        self.num_values = num_values
        self.null = num_values
        self.dropout = dropout
        self.prefix_embed = nn.Embedding(num_values + 1, width)
        self.film_embed = nn.Embedding(num_values + 1, width)
        nn.init.zeros_(self.prefix_embed.weight)
        nn.init.zeros_(self.film_embed.weight)

    def index(self, values: torch.Tensor, drop: bool, generator: torch.Generator | None = None):
        """(N,) ints, -1 = null -> table rows; with `drop`, each is nulled w.p. `dropout`."""
        values = values.reshape(-1).to(torch.int64)
        idx = torch.where(values < 0, torch.full_like(values, self.null), values)
        if drop and self.dropout > 0:
            u = torch.rand(idx.shape, generator=generator, device="cpu").to(idx.device)
            idx = torch.where(u < self.dropout, torch.full_like(idx, self.null), idx)
        return idx

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows -> (prefix token (N, 1, W), FiLM vector (N, W))."""
        return self.prefix_embed(idx)[:, None, :], self.film_embed(idx)
