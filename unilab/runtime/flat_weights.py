"""A policy's weights as one float32 vector: the layout of the shared weight store.

The learner flattens its actor after each update (`actor_to_flat`); each worker copies the
newest vector into its own CPU actor (`flat_to_actor`). Parameters and buffers (normalizer
statistics, exploration flags) travel together, in `state_dict` order.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def actor_to_flat(actor: nn.Module) -> np.ndarray:
    """Parameters and buffers in state_dict order, as one float32 vector (the weight store layout)."""
    with torch.no_grad():
        parts = [
            t.detach().reshape(-1).to("cpu", torch.float32) for t in actor.state_dict().values()
        ]
    return torch.cat(parts).numpy() if parts else np.zeros(0, np.float32)


def flat_to_actor(actor: nn.Module, flat: np.ndarray) -> None:
    state = actor.state_dict()
    total = sum(t.numel() for t in state.values())
    if flat.size != total:
        raise ValueError(f"weight vector has {flat.size} values; the actor has {total}")
    offset = 0
    with torch.no_grad():
        for tensor in state.values():
            n = tensor.numel()
            tensor.copy_(
                torch.from_numpy(flat[offset : offset + n]).view_as(tensor).to(tensor.dtype)
            )
            offset += n
