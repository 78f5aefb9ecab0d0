"""Plain MLP builder shared by actors, critics and heads."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    activation: str = "elu",
    layer_norm: bool = False,
) -> nn.Sequential:
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layers.append(nn.Linear(last, width))
        if layer_norm:
            layers.append(nn.LayerNorm(width))
        layers.append(ACTIVATIONS[activation]())
        last = width
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)
