"""`algo=world_model`: the sizes and loss weights of the world model and its training."""

from __future__ import annotations

from dataclasses import dataclass, field

from unilab.config.checks import checked
from unilab.config.schema import AlgoConfig


@dataclass
class WorldModelConfig(AlgoConfig):
    name: str = "world_model"
    init: str = ""
    """A world-model run directory (or checkpoint file) to start from: its weights and
    normalizer statistics (fine-tuning, as `unilab wm loop` does each round); its model
    settings (channels, latent_dim, dynamics_*, horizon) must be this config's. '' = fresh."""
    horizon: int = checked(8, ge=1)
    """H: control steps per predicted transition; the model steps one action chunk of H at a
    time (frame t, actions t..t+H-1 -> frame t+H), as the flow VLA executes them."""
    latent_dim: int = checked(64, ge=4)
    """Latent size per camera."""
    channels: list[int] = field(default_factory=lambda: [16, 32, 64, 64])
    """Conv channels of the autoencoder, one stride-2 layer each: the image side must be
    divisible by 2**len(channels) (64 px -> 4x4 at the bottleneck)."""
    dynamics_width: int = checked(256, ge=8)
    """Hidden width of the latent dynamics MLP."""
    dynamics_layers: int = checked(3, ge=1)
    """Hidden layers of the latent dynamics MLP."""
    steps: int = checked(3000, ge=1)
    """Gradient steps."""
    batch_size: int = checked(64, ge=1)
    lr: float = checked(1e-3, gt=0.0)
    """AdamW learning rate (constant after a linear warm-up)."""
    warmup_steps: int = checked(100, ge=0)
    weight_decay: float = checked(1e-5, ge=0.0)
    max_grad_norm: float = checked(1.0, ge=0.0)
    """Gradient norm clip (0: off)."""
    latent_weight: float = checked(1.0, ge=0.0)
    """Weight of the predicted-latent error (against the encoded true next frame)."""
    proprio_weight: float = checked(1.0, ge=0.0)
    """Weight of the next-proprioception error (normalized units)."""
    reward_weight: float = checked(1.0, ge=0.0)
    """Weight of the error of the chunk's summed reward."""
    done_weight: float = checked(0.1, ge=0.0)
    """Weight of the episode-end and success cross-entropies."""
    val_fraction: float = 0.1
    """Episodes held out for validation (split by episode, deterministic for a seed)."""
    val_every: int = checked(500, ge=1)
    val_max_frames: int = checked(1024, ge=1)
    proprio_field: str = "obs/policy"
    """Store field of the proprioception."""

    def problems(self) -> list[str]:
        out = []
        if not 0.0 <= self.val_fraction < 1.0:
            out.append(f"val_fraction={self.val_fraction} must be in [0, 1)")
        if not self.channels or any(int(c) < 1 for c in self.channels):
            out.append(f"channels={list(self.channels)} must be one or more positive widths")
        return out
