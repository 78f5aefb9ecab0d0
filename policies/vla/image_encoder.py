"""One camera's image -> a grid of tokens (plus keypoint tokens): a small CNN trained from
scratch.

Input is uint8 (N, H, W, 3) as the renderer and the store produce it, or float in [0, 1]
(what augmentation returns); scaling to [-1, 1] happens here, on the model's device, so
images cross the host-device boundary as uint8. Two coordinate channels (x, y in [-1, 1];
CoordConv) join the colour channels, so every filter knows where it looks. Stride-2 conv
stages (GroupNorm, SiLU) and one residual conv at the end, then an average pool to
`tokens_side` x `tokens_side`, a linear projection to the token width and a learned
position embedding per grid cell.

With `keypoints` K > 0, a spatial soft-argmax (Levine et al. 2016) over the feature map one
stage before the last gives K expected image positions (x, y): where each learned feature
fires, at sub-cell precision that a 4 x 4 grid of pooled tokens lacks. They enter the
prefix as `keypoint_tokens` more tokens (the K points split evenly among them).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def _norm(channels: int) -> nn.GroupNorm:
    groups = next(g for g in (8, 4, 2, 1) if channels % g == 0)
    return nn.GroupNorm(groups, channels)


def _coords(h: int, w: int) -> torch.Tensor:
    """(1, 2, h, w): x and y of each pixel centre in [-1, 1]."""
    ys = torch.linspace(-1.0, 1.0, h)[:, None].expand(h, w)
    xs = torch.linspace(-1.0, 1.0, w)[None, :].expand(h, w)
    return torch.stack([xs, ys])[None]


class SpatialSoftArgmax(nn.Module):
    """(N, C, h, w) features -> (N, K, 2) expected (x, y) in [-1, 1] of K learned maps."""

    def __init__(self, channels: int, keypoints: int, h: int, w: int) -> None:
        super().__init__()
        self.maps = nn.Conv2d(channels, keypoints, 1)
        self.log_temperature = nn.Parameter(torch.zeros(()))
        self.register_buffer("grid", _coords(h, w).reshape(2, h * w).t().contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.maps(x).flatten(2) * torch.exp(-self.log_temperature)
        weights = torch.softmax(logits, dim=-1)  # (N, K, h*w)
        grid: torch.Tensor = self.grid  # type: ignore[assignment]
        return weights @ grid


class ImageEncoder(nn.Module):
    def __init__(
        self,
        height: int,
        width: int,
        channels: Sequence[int],
        tokens_side: int,
        token_width: int,
        keypoints: int = 0,
        keypoint_tokens: int = 1,
    ) -> None:
        super().__init__()
        self.register_buffer("coords", _coords(height, width))
        stages: list[nn.Module] = []
        last, h, w = 5, height, width
        sizes = []
        for c in channels:
            stages.append(
                nn.Sequential(nn.Conv2d(last, c, 3, stride=2, padding=1), _norm(c), nn.SiLU())
            )
            last, h, w = c, (h + 1) // 2, (w + 1) // 2
            sizes.append((c, h, w))
        self.stages = nn.ModuleList(stages)
        self.residual = nn.Sequential(nn.Conv2d(last, last, 3, padding=1), _norm(last), nn.SiLU())
        side_h, side_w = min(tokens_side, h), min(tokens_side, w)
        # A fixed pool (kernel from the known image size) keeps the ONNX graph static.
        self.pool = nn.AvgPool2d((h // side_h, w // side_w))
        self.grid = ((h // (h // side_h)), (w // (w // side_w)))
        self.proj = nn.Linear(last, token_width)
        self.pos = nn.Parameter(torch.randn(self.grid[0] * self.grid[1], token_width) * 0.02)
        self.keypoints: SpatialSoftArgmax | None = None
        self.keypoint_tokens = 0
        if keypoints:
            if keypoints % keypoint_tokens:
                raise ValueError(
                    f"keypoints {keypoints} must split evenly into {keypoint_tokens} tokens"
                )
            # One stage before the last: twice the resolution of the final map.
            c, kh, kw = sizes[-2] if len(sizes) > 1 else sizes[-1]
            self.keypoint_stage = len(sizes) - 2 if len(sizes) > 1 else 0
            self.keypoints = SpatialSoftArgmax(c, keypoints, kh, kw)
            self.keypoint_tokens = keypoint_tokens
            per_token = 2 * keypoints // keypoint_tokens
            self.keypoint_proj = nn.Sequential(
                nn.Linear(per_token, token_width), nn.SiLU(), nn.Linear(token_width, token_width)
            )
            self.keypoint_pos = nn.Parameter(torch.randn(keypoint_tokens, token_width) * 0.02)
        self.num_tokens = self.grid[0] * self.grid[1] + self.keypoint_tokens

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """(N, H, W, 3) uint8 or float in [0, 1] -> (N, tokens, token_width)."""
        x = image.permute(0, 3, 1, 2).to(torch.float32)
        x = x * (2.0 / 255.0) - 1.0 if image.dtype == torch.uint8 else x * 2.0 - 1.0
        coords: torch.Tensor = self.coords  # type: ignore[assignment]
        x = torch.cat([x, coords.expand(x.shape[0], -1, -1, -1)], dim=1)
        points: torch.Tensor | None = None
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if self.keypoints is not None and i == self.keypoint_stage:
                points = self.keypoints(x)
        x = self.pool(x + self.residual(x))
        tokens = self.proj(x.flatten(2).transpose(1, 2)) + self.pos
        if points is None:
            return tokens
        grouped = points.reshape(points.shape[0], self.keypoint_tokens, -1)
        extra = self.keypoint_proj(grouped) + self.keypoint_pos
        return torch.cat([tokens, extra], dim=1)
