"""One camera's image -> a grid of tokens: a small CNN trained from scratch.

Input is uint8 (N, H, W, 3) as the renderer and the store produce it, or float in [0, 1]
(what augmentation returns); scaling to [-1, 1] happens here, on the model's device, so
images cross the host-device boundary as uint8. Stride-2 conv stages (GroupNorm, SiLU) and
one residual conv at the end, then an average pool to `tokens_side` x `tokens_side`, a
linear projection to the token width and a learned position embedding per grid cell.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def _norm(channels: int) -> nn.GroupNorm:
    groups = next(g for g in (8, 4, 2, 1) if channels % g == 0)
    return nn.GroupNorm(groups, channels)


class ImageEncoder(nn.Module):
    def __init__(
        self,
        height: int,
        width: int,
        channels: Sequence[int],
        tokens_side: int,
        token_width: int,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        last, h, w = 3, height, width
        for c in channels:
            layers += [nn.Conv2d(last, c, 3, stride=2, padding=1), _norm(c), nn.SiLU()]
            last, h, w = c, (h + 1) // 2, (w + 1) // 2
        self.stem = nn.Sequential(*layers)
        self.residual = nn.Sequential(nn.Conv2d(last, last, 3, padding=1), _norm(last), nn.SiLU())
        side_h, side_w = min(tokens_side, h), min(tokens_side, w)
        # A fixed pool (kernel from the known image size) keeps the ONNX graph static.
        self.pool = nn.AvgPool2d((h // side_h, w // side_w))
        self.grid = ((h // (h // side_h)), (w // (w // side_w)))
        self.num_tokens = self.grid[0] * self.grid[1]
        self.proj = nn.Linear(last, token_width)
        self.pos = nn.Parameter(torch.randn(self.num_tokens, token_width) * 0.02)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """(N, H, W, 3) uint8 or float in [0, 1] -> (N, tokens, token_width)."""
        x = image.permute(0, 3, 1, 2).to(torch.float32)
        x = x * (2.0 / 255.0) - 1.0 if image.dtype == torch.uint8 else x * 2.0 - 1.0
        x = self.stem(x)
        x = self.pool(x + self.residual(x))
        return self.proj(x.flatten(2).transpose(1, 2)) + self.pos
