"""Transformer pieces of the VLA: attention with a separable key/value projection (so the
action expert projects the prefix once per chunk), a pre-norm encoder block, an adaptive-norm
(adaLN-Zero) block for the action expert, and the sine-cosine time embedding.

Attention is written out (matmul, softmax) rather than `scaled_dot_product_attention` so
the ONNX graph is plain and identical across exporters; at these sizes it costs the same.
Masks are additive biases of a large negative number, not -inf, so a row whose keys are all
masked stays finite.
"""

from __future__ import annotations

import math

import torch
from torch import nn

MASKED = -1e9


def mask_bias(valid: torch.Tensor) -> torch.Tensor:
    """(N, S) bool of usable keys -> (N, 1, 1, S) additive attention bias."""
    return (~valid).to(torch.float32)[:, None, None, :] * MASKED


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        n, s, _ = x.shape
        return x.reshape(n, s, self.heads, self.head_dim).transpose(1, 2)

    def keys_values(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, S, W) -> keys and values, each (N, heads, S, head_dim)."""
        k, v = self.kv(source).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def attend(
        self,
        x: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor],
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        n, s, w = x.shape
        q = self._split(self.q(x))
        k, v = kv
        scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(self.head_dim))
        if bias is not None:
            scores = scores + bias
        out = torch.softmax(scores, dim=-1) @ v
        return self.out(out.transpose(1, 2).reshape(n, s, w))

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """Self-attention."""
        return self.attend(x, self.keys_values(x), bias)


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

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), bias)
        return x + self.mlp(self.norm2(x))


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x * scale + shift with (N, W) scale/shift broadcast over tokens (scale already 1 + s)."""
    return torch.addcmul(shift[:, None, :], x, scale[:, None, :])


class ExpertBlock(nn.Module):
    """Action-expert block: self-attention over the chunk's action tokens, cross-attention to
    the (cached) prefix, MLP; each sub-layer's norm is shifted, scaled and gated by the
    conditioning vector c (time, plus token/advantage FiLM), zero-initialised so every block
    starts as the identity (adaLN-Zero, as in DiT; pi0.5 feeds time through adaRMSNorm).

    `modulation(c)` depends only on c, so a sampler computes it for all K Euler steps in one
    call and `forward` does no conditioning work per step."""

    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm_self = nn.LayerNorm(width, elementwise_affine=False)
        self.self_attn = Attention(width, heads)
        self.norm_cross = nn.LayerNorm(width, elementwise_affine=False)
        self.cross_attn = Attention(width, heads)
        self.norm_mlp = nn.LayerNorm(width, elementwise_affine=False)
        self.mlp = feed_forward(width, mlp_ratio)
        self.ada = nn.Linear(width, 9 * width)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)
        # The scales enter as 1 + s: add the 1 to the bias's view once, not per step.
        self.register_buffer("_one", _scale_offsets(width, 9, (1, 4, 7)), persistent=False)

    def modulation(self, cond: torch.Tensor) -> torch.Tensor:
        """(B, W) conditioning -> (B, 9W) shifts, scales (1 + s) and gates."""
        return self.ada(nn.functional.silu(cond)) + self._one

    def forward(
        self,
        x: torch.Tensor,
        mod: torch.Tensor,
        prefix_kv: tuple[torch.Tensor, torch.Tensor],
        prefix_bias: torch.Tensor | None,
    ) -> torch.Tensor:
        s1, c1, g1, s2, c2, g2, s3, c3, g3 = mod.chunk(9, dim=-1)
        x = torch.addcmul(x, g1[:, None, :], self.self_attn(modulate(self.norm_self(x), s1, c1)))
        h = modulate(self.norm_cross(x), s2, c2)
        x = torch.addcmul(x, g2[:, None, :], self.cross_attn.attend(h, prefix_kv, prefix_bias))
        return torch.addcmul(x, g3[:, None, :], self.mlp(modulate(self.norm_mlp(x), s3, c3)))


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
