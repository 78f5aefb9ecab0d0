"""Transformer pieces of the VLA: attention on heads-first tensors, a pre-norm encoder
block, an adaptive-norm (adaLN-Zero) action-expert block whose prefix keys/values are
projected once per chunk, and the sine-cosine time embedding.

Attention is written out (baddbmm, softmax, bmm) rather than `scaled_dot_product_attention`
so the ONNX graph is plain and identical across exporters; at these sizes SDPA was slower
on this CPU (measured: 187 vs 137 us for one small call).
Masks are additive biases of a large negative number, not -inf, so a row whose keys are all
masked stays finite.
"""

from __future__ import annotations

import math

import torch
from torch import nn

MASKED = -1e9


def mask_bias(valid: torch.Tensor, heads: int) -> torch.Tensor:
    """(N, S) bool of usable keys -> (N * heads, 1, S) additive bias (broadcast over queries
    by `baddbmm`)."""
    n, s = valid.shape
    bias = (~valid).to(torch.float32) * MASKED
    return bias[:, None, :].expand(n, heads, s).reshape(n * heads, 1, s)


class Attention(nn.Module):
    """Multi-head attention on (N * heads, S, head_dim) tensors: the bias add and the
    1/sqrt(d) scale ride in one `baddbmm`, which matters at batch 1 where every op costs
    more than its arithmetic. Keys are kept transposed, (N * heads, head_dim, S)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(N, S, W) -> (N * heads, S, head_dim)."""
        n, s, _ = x.shape
        x = x.reshape(n, s, self.heads, self.head_dim).transpose(1, 2)
        return x.reshape(n * self.heads, s, self.head_dim)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(N, S, W) -> queries (N*h, S, d), transposed keys (N*h, d, S), values (N*h, S, d)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.split(q), self.split(k).transpose(1, 2), self.split(v)

    def attend(
        self, q: torch.Tensor, k_t: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, n: int
    ) -> torch.Tensor:
        """Heads-first queries/keys/values -> (n, S_q, W) after the output projection."""
        scores = torch.baddbmm(bias, q, k_t, alpha=self.scale)
        out = torch.bmm(torch.softmax(scores, dim=-1), v)
        s = out.shape[1]
        out = out.reshape(n, self.heads, s, self.head_dim).transpose(1, 2)
        return self.out(out.reshape(n, s, self.heads * self.head_dim))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Self-attention; `bias` from `mask_bias`."""
        q, k_t, v = self.project(x)
        return self.attend(q, k_t, v, bias, x.shape[0])


def feed_forward(width: int, ratio: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(width, ratio * width), nn.GELU(), nn.Linear(ratio * width, width)
    )


class EncoderBlock(nn.Module):
    """Pre-norm bidirectional transformer block (prefix fusion)."""

    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = feed_forward(width, mlp_ratio)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), bias)
        return x + self.mlp(self.norm2(x))


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x * scale + shift, with (N, 1, W) scale/shift broadcast over tokens (scale is 1 + s)."""
    return torch.addcmul(shift, x, scale)


class ExpertBlock(nn.Module):
    """Action-expert block: the chunk's action tokens attend jointly to the cached prefix and
    to each other (pi0: one attention over [prefix; actions], the prefix never attending
    back), then an MLP. Each sub-layer's norm is shifted, scaled and gated by the
    conditioning vector c (time, plus token/advantage FiLM), zero-initialised so every block
    starts as the identity (adaLN-Zero, as in DiT; pi0.5 feeds time through adaRMSNorm).

    The prefix's keys/values have their own projection (`prefix_kv`), computed once per
    chunk; `modulation(c)` depends only on c, so a sampler computes it for all K Euler steps
    in one call and `forward` does no conditioning work per step."""

    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm_attn = nn.LayerNorm(width, elementwise_affine=False)
        self.attn = Attention(width, heads)
        self.prefix_kv = nn.Linear(width, 2 * width)
        self.norm_mlp = nn.LayerNorm(width, elementwise_affine=False)
        self.mlp = feed_forward(width, mlp_ratio)
        self.ada = nn.Linear(width, 6 * width)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)
        # The scales enter as 1 + s: the 1 is added once per conditioning, not per step.
        self.register_buffer("_one", _scale_offsets(width, 6, (1, 4)), persistent=False)

    def prefix_keys_values(self, prefix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, S, W) prefix tokens -> transposed keys (N*h, d, S), values (N*h, S, d)."""
        k, v = self.prefix_kv(prefix).chunk(2, dim=-1)
        return self.attn.split(k).transpose(1, 2), self.attn.split(v)

    def modulation(self, cond: torch.Tensor) -> torch.Tensor:
        """(B, W) conditioning -> (B, 1, 6W) shifts, scales (1 + s) and gates, with the
        token axis in place so the per-step code broadcasts without reshaping."""
        return (self.ada(nn.functional.silu(cond)) + self._one)[:, None, :]

    def forward(
        self,
        x: torch.Tensor,
        mod: torch.Tensor,
        prefix_kv: tuple[torch.Tensor, torch.Tensor],
        bias: torch.Tensor,
    ) -> torch.Tensor:
        """`bias` covers [prefix; actions] keys, (N*h, 1, S + H)."""
        s1, c1, g1, s2, c2, g2 = mod.chunk(6, dim=-1)
        q, k_t, v = self.attn.project(modulate(self.norm_attn(x), s1, c1))
        k_t = torch.cat([prefix_kv[0], k_t], dim=2)
        v = torch.cat([prefix_kv[1], v], dim=1)
        x = torch.addcmul(x, g1, self.attn.attend(q, k_t, v, bias, x.shape[0]))
        return torch.addcmul(x, g2, self.mlp(modulate(self.norm_mlp(x), s2, c2)))


def _scale_offsets(width: int, parts: int, scale_parts: tuple[int, ...]) -> torch.Tensor:
    """A (parts * width,) vector with 1 in the slots of the scale parts, 0 elsewhere."""
    out = torch.zeros(parts, width)
    out[list(scale_parts)] = 1.0
    return out.reshape(-1)


def sincos_time_embedding(
    t: torch.Tensor, dim: int, min_period: float = 4e-3, max_period: float = 4.0
) -> torch.Tensor:
    """(N,) times -> (N, dim) sine-cosine features with periods log-spaced in
    [min_period, max_period] (pi0's choice: fine resolution over t in [0, 1])."""
    half = dim // 2
    fraction = torch.linspace(0.0, 1.0, half, device=t.device, dtype=torch.float32)
    period = min_period * (max_period / min_period) ** fraction
    angle = t.to(torch.float32)[:, None] * (2.0 * math.pi / period)[None, :]
    emb = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb
