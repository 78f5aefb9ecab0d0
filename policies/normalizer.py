"""Running observation normalization that lives inside the policy, so export carries it."""

from __future__ import annotations

import torch
from torch import nn


class RunningNormalizer(nn.Module):
    """Normalizes by running mean and variance (parallel Welford); frozen in eval mode."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.clip = clip
        self.eps = eps
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp((x - self.mean) / torch.sqrt(self.var + self.eps), -self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, x.shape[-1]).to(self.mean.dtype)
        n = x.shape[0]
        if n == 0:
            return
        self.update_from_moments(x.mean(0), x.var(0, unbiased=False), n)

    @torch.no_grad()
    def update_from_moments(
        self, batch_mean: torch.Tensor, batch_var: torch.Tensor, n: int
    ) -> None:
        """Merge a batch given by its mean, (biased) variance and size: what data-parallel
        learners have after summing over ranks."""
        if n == 0:
            return
        batch_mean = batch_mean.to(self.mean.dtype)
        batch_var = batch_var.to(self.var.dtype)
        total = self.count + n
        delta = batch_mean - self.mean
        frac = (n / total).to(self.mean.dtype)
        self.mean += delta * frac
        m2 = self.var * self.count.to(self.var.dtype) + batch_var * n
        m2 += delta.square() * (self.count * n / total).to(self.var.dtype)
        self.var.copy_(m2 / total.to(self.var.dtype))
        self.count.copy_(total)
