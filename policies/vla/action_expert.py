"""The action expert: the flow-matching velocity network over a chunk of H action tokens.

Per Euler step only this runs: the noisy chunk x_t (N, H, A) becomes H tokens (linear +
learned position), the time t becomes a sine-cosine embedding through a small MLP, summed
with the conditions' FiLM vector into one conditioning vector, and adaLN blocks attend to
each other and to the prefix, whose keys/values `context` projected once per chunk.
Without time input (`timed=False`) the same module is the regression head of `bc_mse`:
learned queries in place of x_t, a learned constant in place of the time embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from unilab.policies.vla.config import VLAConfig
from unilab.policies.vla.layers import ExpertBlock, mask_bias, modulate, sincos_time_embedding
from unilab.policies.vla.prefix import Prefix


@dataclass
class ExpertContext:
    """The prefix as every expert layer reads it: its keys/values per layer (heads-first),
    the attention bias over [prefix; action] keys, the FiLM vector, and the prefix's valid
    mask (whose first dim is the batch size). Built once per chunk."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    bias: torch.Tensor
    film: torch.Tensor | None
    valid: torch.Tensor

    @property
    def batch(self) -> int:
        return self.valid.shape[0]

    def repeat(self, times: int) -> ExpertContext:
        """The same context for `times` stacked copies of the batch (batch-major repeat)."""

        def rep(x: torch.Tensor) -> torch.Tensor:
            return x.repeat(times, *([1] * (x.dim() - 1)))

        return ExpertContext(
            [(rep(k), rep(v)) for k, v in self.kv],
            rep(self.bias),
            None if self.film is None else rep(self.film),
            rep(self.valid),
        )


Modulations = list[torch.Tensor]
"""Per expert block (B, 1, 6W), then the output layer's (B, 1, 2W): everything the conditioning
vector decides, computed before the Euler loop."""


class ActionExpert(nn.Module):
    def __init__(self, action_dim: int, cfg: VLAConfig, timed: bool = True) -> None:
        super().__init__()
        w = cfg.width
        self.timed = timed
        self.width = w
        self.horizon = cfg.horizon
        self.heads = cfg.heads
        self.pos = nn.Parameter(torch.randn(cfg.horizon, w) * 0.02)
        if timed:
            self.action_in = nn.Linear(action_dim, w)
            self.time_mlp = nn.Sequential(nn.Linear(w, w), nn.SiLU(), nn.Linear(w, w))
        else:
            self.const = nn.Parameter(torch.zeros(w))
        self.blocks = nn.ModuleList(
            ExpertBlock(w, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.expert_layers)
        )
        self.norm_out = nn.LayerNorm(w, elementwise_affine=False)
        self.ada_out = nn.Linear(w, 2 * w)
        nn.init.zeros_(self.ada_out.weight)
        nn.init.zeros_(self.ada_out.bias)
        self.action_out = nn.Linear(w, action_dim)

    def _blocks(self) -> list[ExpertBlock]:
        return [b for b in self.blocks if isinstance(b, ExpertBlock)]

    def context(self, prefix: Prefix) -> ExpertContext:
        kv = [block.prefix_keys_values(prefix.tokens) for block in self._blocks()]
        n = prefix.valid.shape[0]
        actions = torch.ones(n, self.horizon, dtype=torch.bool, device=prefix.valid.device)
        bias = mask_bias(torch.cat([prefix.valid, actions], dim=1), self.heads)
        return ExpertContext(kv, bias, prefix.film, prefix.valid)

    def modulations(self, film: torch.Tensor | None, t: torch.Tensor | None, n: int) -> Modulations:
        """Conditioning for `n` rows at times `t` (n,) (None for the untimed head); `film`
        (n, W) or None."""
        if self.timed:
            assert t is not None
            cond = self.time_mlp(sincos_time_embedding(t, self.width))
        else:
            cond = self.const.expand(n, -1)
        if film is not None:
            cond = cond + film
        mods = [block.modulation(cond) for block in self._blocks()]
        shift, scale = self.ada_out(nn.functional.silu(cond)).chunk(2, dim=-1)
        return [*mods, torch.cat([shift, scale + 1.0], dim=-1)[:, None, :]]

    def step_modulations(self, ctx: ExpertContext, times: torch.Tensor) -> list[Modulations]:
        """Modulations of every Euler step at once: `times` (K,) -> K lists, each for the
        context's N rows (one batched call instead of K)."""
        n, k = ctx.batch, times.shape[0]
        film = None if ctx.film is None else ctx.film.repeat(k, 1)
        # step-major rows (k * n + i), as expand+reshape: export-friendly with a symbolic n
        t = times[:, None].expand(k, n).reshape(-1)
        mods = self.modulations(film, t, n * k)
        split = [m.reshape(k, n, 1, m.shape[-1]).unbind(0) for m in mods]
        return [list(step) for step in zip(*split, strict=True)]

    def run(
        self, ctx: ExpertContext, mods: Modulations, x_t: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (output (N, H, A): velocity, or the regressed chunk; last hidden (N, H, W))."""
        n = ctx.batch
        h = self.action_in(x_t) + self.pos if x_t is not None else self.pos.expand(n, -1, -1)
        for block, kv, mod in zip(self._blocks(), ctx.kv, mods[:-1], strict=True):
            h = block(h, mod, kv, ctx.bias)
        shift, scale = mods[-1].chunk(2, dim=-1)
        h = modulate(self.norm_out(h), shift, scale)
        return self.action_out(h), h

    def forward(
        self, ctx: ExpertContext, x_t: torch.Tensor | None = None, t: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One call with its own conditioning (training, log-prob recomputation)."""
        n = ctx.batch
        return self.run(ctx, self.modulations(ctx.film, t, n), x_t if self.timed else None)
