"""Instruction word ids -> tokens: an embedding over the task's shipped vocabulary plus a
learned position per word; padding words are masked out of attention downstream."""

from __future__ import annotations

import torch
from torch import nn


class InstructionEncoder(nn.Module):
    def __init__(self, vocab_size: int, pad_id: int, length: int, token_width: int) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.length = length
        self.embed = nn.Embedding(vocab_size, token_width)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.pos = nn.Parameter(torch.randn(length, token_width) * 0.02)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, L) int64 -> tokens (N, L, W) and valid mask (N, L) bool."""
        return self.embed(ids) + self.pos, ids != self.pad_id
