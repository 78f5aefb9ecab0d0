"""The prefix: every camera's tokens, one proprioception token, the instruction's word
tokens and one token per optional condition, fused by a small bidirectional transformer.

It runs once per chunk; the action expert reads it through cross-attention at every Euler
step (pi0: the prefix never sees the action tokens, so its keys/values are cached).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from unilab.policies.normalizer import RunningNormalizer
from unilab.policies.vla.conditioning import Condition
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.image_encoder import ImageEncoder
from unilab.policies.vla.layers import EncoderBlock, mask_bias
from unilab.policies.vla.text_encoder import InstructionEncoder


@dataclass
class Prefix:
    tokens: torch.Tensor
    """(N, S, W) fused prefix tokens."""
    valid: torch.Tensor
    """(N, S) bool: keys the action expert may attend to (instruction padding is not)."""
    film: torch.Tensor | None
    """(N, W) sum of the conditions' FiLM vectors, None without conditions."""


class PrefixEncoder(nn.Module):
    def __init__(self, inputs: VLAInputs, cfg: VLAConfig) -> None:
        super().__init__()
        w = cfg.width
        self.inputs = inputs
        self.cameras = list(inputs.cameras)
        self.images = nn.ModuleDict(
            {
                cam: ImageEncoder(
                    h,
                    wd,
                    cfg.image_channels,
                    cfg.image_tokens_side,
                    w,
                    cfg.image_keypoints,
                    cfg.image_keypoint_tokens,
                )
                for cam, (h, wd) in inputs.cameras.items()
            }
        )
        self.proprio_norm = RunningNormalizer(max(inputs.proprio_dim, 1))
        self.proprio: nn.Module | None = None
        if inputs.proprio_dim:
            self.proprio = nn.Sequential(
                nn.Linear(inputs.proprio_dim, w), nn.SiLU(), nn.Linear(w, w)
            )
        self.instruction: InstructionEncoder | None = None
        if inputs.vocab_size:
            self.instruction = InstructionEncoder(
                inputs.vocab_size, inputs.pad_id, inputs.instruction_len, w
            )
        self.token = Condition(cfg.n_tokens, w, cfg.token_dropout) if cfg.n_tokens else None
        self.advantage = Condition(2, w, cfg.advantage_dropout) if cfg.advantage else None
        self.blocks = nn.ModuleList(
            EncoderBlock(w, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.prefix_layers)
        )
        self.norm = nn.LayerNorm(w)
        self.heads = cfg.heads

    @property
    def conditions(self) -> dict[str, Condition]:
        out = {}
        if self.token is not None:
            out["token"] = self.token
        if self.advantage is not None:
            out["advantage"] = self.advantage
        return out

    def forward(
        self, obs: dict[str, torch.Tensor], condition_rows: dict[str, torch.Tensor]
    ) -> Prefix:
        """`obs` holds the input groups; `condition_rows` the embedding rows of each enabled
        condition (see `Condition.index`)."""
        parts: list[torch.Tensor] = []
        valid: list[torch.Tensor] = []
        n = next(iter(obs.values())).shape[0]
        device = next(iter(obs.values())).device
        for cam in self.cameras:
            tokens = self.images[cam](obs[f"images/{cam}"])
            parts.append(tokens)
            valid.append(torch.ones(n, tokens.shape[1], dtype=torch.bool, device=device))
        if self.proprio is not None:
            parts.append(self.proprio(self.proprio_norm(obs["policy"].to(torch.float32)))[:, None])
            valid.append(torch.ones(n, 1, dtype=torch.bool, device=device))
        if self.instruction is not None:
            words, mask = self.instruction(obs["instruction"].to(torch.int64))
            parts.append(words)
            valid.append(mask)
        film: torch.Tensor | None = None
        for name, cond in self.conditions.items():
            token, vec = cond(condition_rows[name])
            parts.append(token)
            valid.append(torch.ones(n, 1, dtype=torch.bool, device=device))
            film = vec if film is None else film + vec
        x = torch.cat(parts, dim=1)
        keep = torch.cat(valid, dim=1)
        bias = mask_bias(keep, self.heads)
        for block in self.blocks:
            x = block(x, bias)
        return Prefix(self.norm(x), keep, film)
