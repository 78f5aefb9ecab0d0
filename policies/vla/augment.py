"""Input augmentation on the learner's device, batched, per-sample random. Images: a random
shift (replicate-pad by `pad` pixels, crop back to size: DrQ's shift) and colour jitter
(brightness, contrast, saturation); uint8 (N, H, W, 3) in, float (N, H, W, 3) in [0, 1]
out, which the image encoder accepts as it accepts uint8. Vectors: uniform noise per entry
(off by default; docs/vla.md shows why a state policy needs it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

GRAY = (0.299, 0.587, 0.114)


@dataclass
class AugmentConfig:
    shift_pad: int = 4
    """Random shift of up to this many pixels each way (0: off)."""
    brightness: float = 0.2
    """Brightness factor drawn from [1 - b, 1 + b] (0: off)."""
    contrast: float = 0.2
    """Contrast factor drawn from [1 - c, 1 + c] (0: off)."""
    saturation: float = 0.2
    """Saturation factor drawn from [1 - s, 1 + s] (0: off)."""
    vector_noise: float = 0.0
    """Uniform noise of +- this on every entry of the vector input (`policy`: proprioception,
    and the object state where a task gives it), in task units, as `task.obs_noise` adds at
    run time; teaches the policy to act on a state known only to this precision (0: off)."""


def _uniform(n: int, spread: float, device: torch.device, gen: torch.Generator | None):
    u = torch.rand(n, generator=gen, device="cpu").to(device)
    return (1.0 + spread * (2.0 * u - 1.0))[:, None, None, None]


def random_shift(images: torch.Tensor, pad: int, gen: torch.Generator | None = None):
    """(N, H, W, C) -> same shape, each image shifted by up to `pad` pixels (edges repeat)."""
    if pad <= 0:
        return images
    n, h, w, _ = images.shape
    dev = images.device
    x = images.permute(0, 3, 1, 2)
    padded = F.pad(x.float(), (pad, pad, pad, pad), mode="replicate").to(images.dtype)
    oy = torch.randint(0, 2 * pad + 1, (n,), generator=gen).to(dev)
    ox = torch.randint(0, 2 * pad + 1, (n,), generator=gen).to(dev)
    rows = (oy[:, None] + torch.arange(h, device=dev))[:, :, None]
    cols = (ox[:, None] + torch.arange(w, device=dev))[:, None, :]
    batch = torch.arange(n, device=dev)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows, cols]


def color_jitter(images: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator | None = None):
    """Float (N, H, W, 3) in [0, 1] -> jittered, clamped to [0, 1]."""
    n, dev = images.shape[0], images.device
    x = images
    gray_w = torch.tensor(GRAY, device=dev)
    if cfg.brightness > 0:
        x = x * _uniform(n, cfg.brightness, dev, gen)
    if cfg.contrast > 0:
        mean = (x * gray_w).sum(-1, keepdim=True).mean((1, 2), keepdim=True)
        x = (x - mean) * _uniform(n, cfg.contrast, dev, gen) + mean
    if cfg.saturation > 0:
        gray = (x * gray_w).sum(-1, keepdim=True)
        x = (x - gray) * _uniform(n, cfg.saturation, dev, gen) + gray
    return x.clamp(0.0, 1.0)


def vector_noise(x: torch.Tensor, scale: float, gen: torch.Generator | None = None):
    """x + uniform noise in [-scale, scale] per entry (x unchanged for scale 0)."""
    if scale <= 0:
        return x
    u = torch.rand(x.shape, generator=gen, device="cpu").to(x.device, x.dtype)
    return x + scale * (2.0 * u - 1.0)


def augment_images(
    images: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator | None = None
) -> torch.Tensor:
    """uint8 (N, H, W, 3) -> augmented float (N, H, W, 3) in [0, 1]."""
    x = random_shift(images, cfg.shift_pad, gen)
    return color_jitter(x.to(torch.float32) * (1.0 / 255.0), cfg, gen)
