"""The world model: camera frames -> latents (a small conv autoencoder per frame, shared by
the cameras), and a latent dynamics MLP that steps one action chunk at a time.

    z_t = encode(frames_t)                                   (B, cams, latent)
    z_t+H, p_t+H, reward, done, success = predict(z_t, p_t, actions t..t+H-1, pad mask)
    frames_t+H ~ decode(z_t+H)

Latents and proprioception are predicted as residuals (next = current + delta): a model
that has learnt nothing yet is the copy-last-frame baseline, which is what it is scored
against (`unilab.worldmodel.fidelity`). Proprioception and actions are normalized with
statistics fitted on the training frames and kept as buffers, so a checkpoint carries them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import torch
from torch import nn


def to_unit(images: torch.Tensor) -> torch.Tensor:
    """uint8 (..., H, W, 3) -> float (..., 3, H, W) in [0, 1]."""
    return images.to(torch.float32).movedim(-1, -3) / 255.0


class FrameAutoencoder(nn.Module):
    """(N, 3, S, S) in [0, 1] <-> (N, latent): stride-2 convs down to S / 2**len(channels)."""

    def __init__(self, size: int, channels: Sequence[int], latent: int) -> None:
        super().__init__()
        depth = len(channels)
        if size % 2**depth:
            raise ValueError(
                f"image side {size} is not divisible by 2**{depth} (one halving per entry of "
                f"channels={list(channels)}); use fewer channels entries or another image size"
            )
        self.bottom = size // 2**depth
        down: list[nn.Module] = []
        widths = [3, *channels]
        for a, b in itertools.pairwise(widths):
            down += [nn.Conv2d(a, b, 4, stride=2, padding=1), nn.SiLU()]
        flat = channels[-1] * self.bottom**2
        self.encoder = nn.Sequential(*down, nn.Flatten(), nn.Linear(flat, latent))
        up: list[nn.Module] = []
        back = list(reversed(widths))
        for i, (a, b) in enumerate(itertools.pairwise(back)):
            up.append(nn.ConvTranspose2d(a, b, 4, stride=2, padding=1))
            if i < depth - 1:
                up.append(nn.SiLU())
        self.expand = nn.Linear(latent, flat)
        self.decoder = nn.Sequential(*up)
        self.top = channels[-1]

    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.encoder(frames)
        return result

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        grid = self.expand(latents).view(-1, self.top, self.bottom, self.bottom)
        return torch.sigmoid(self.decoder(grid))


class Normalizer(nn.Module):
    """Fixed mean/std (fitted once on training frames), saved with the weights."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def fit(self, x: torch.Tensor) -> None:
        flat = x.reshape(-1, x.shape[-1]).to(torch.float32)
        self.mean.copy_(flat.mean(0))
        self.std.copy_(flat.std(0, unbiased=False).clamp_min(1e-3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.float32) - self.mean) / self.std

    def inverse(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.std + self.mean


class WorldModel(nn.Module):
    """Autoencoder + chunk dynamics for `cameras` square images of side `size`."""

    def __init__(
        self,
        cameras: Sequence[str],
        size: int,
        proprio_dim: int,
        action_dim: int,
        horizon: int,
        *,
        latent: int = 64,
        channels: Sequence[int] = (16, 32, 64, 64),
        width: int = 256,
        layers: int = 3,
    ) -> None:
        super().__init__()
        if not cameras:
            raise ValueError("the world model needs at least one camera (task.cameras)")
        self.cameras = tuple(cameras)
        self.size, self.proprio_dim, self.action_dim = size, proprio_dim, action_dim
        self.horizon, self.latent = horizon, latent
        self.autoencoder = FrameAutoencoder(size, channels, latent)
        self.proprio_norm = Normalizer(max(proprio_dim, 1))
        self.action_norm = Normalizer(action_dim)
        z = len(self.cameras) * latent
        inp = z + proprio_dim + horizon * (action_dim + 1)
        body: list[nn.Module] = []
        for i in range(layers):
            body += [nn.Linear(inp if i == 0 else width, width), nn.LayerNorm(width), nn.SiLU()]
        self.body = nn.Sequential(*body)
        # delta z, delta p, reward, done logit, success logit
        self.head = nn.Linear(width, z + proprio_dim + 3)
        nn.init.zeros_(self.head.weight)  # starts as copy-last-frame: residuals of zero
        nn.init.zeros_(self.head.bias)

    # -- frames <-> latents --------------------------------------------------------------
    def encode(self, frames: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """{camera: uint8 (B, S, S, 3)} -> (B, cams, latent)."""
        stacked = torch.stack([to_unit(frames[c]) for c in self.cameras], 1)
        b = stacked.shape[0]
        return self.autoencoder.encode(stacked.flatten(0, 1)).view(b, len(self.cameras), -1)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """(B, cams, latent) -> (B, cams, 3, S, S) in [0, 1]."""
        b = latents.shape[0]
        out = self.autoencoder.decode(latents.flatten(0, 1))
        return out.view(b, len(self.cameras), 3, self.size, self.size)

    # -- dynamics ------------------------------------------------------------------------
    def predict(
        self,
        latents: torch.Tensor,
        proprio: torch.Tensor,
        actions: torch.Tensor,
        is_pad: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chunk ahead. latents (B, cams, latent); proprio (B, P) in normalized units;
        actions (B, H, A) raw; is_pad (B, H) bool (steps past the episode's end).
        -> next latents, next normalized proprio, chunk reward (B,), logits (B,) of "the
        episode terminates in this chunk" and of "... and succeeds"."""
        keep = (~is_pad).to(torch.float32)[..., None]
        acts = self.action_norm(actions) * keep
        x = torch.cat([latents.flatten(1), proprio, acts.flatten(1), keep.flatten(1)], 1)
        out = self.head(self.body(x))
        z = latents.shape[1] * latents.shape[2]
        p = self.proprio_dim
        next_latents = latents + out[:, :z].view_as(latents)
        next_proprio = proprio + out[:, z : z + p]
        return next_latents, next_proprio, out[:, z + p], out[:, z + p + 1], out[:, z + p + 2]
