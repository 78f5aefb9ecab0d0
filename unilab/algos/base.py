"""What every learner provides to the training loop.

The runtime never looks inside an algorithm: it asks which transition fields a chunk must
carry (`chunk_fields`), builds the actor in each worker (`build_actor`), publishes the
learner's actor weights (`actor`), and hands over batches of chunks (`update`).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from unilab.config.schema import AlgoConfig

FieldSpecs = dict[str, tuple[tuple[int, ...], str]]
"""field name -> (shape per step per env, numpy dtype name)."""


def transition_fields(
    obs_dims: dict[str, int], action_dim: int, next_obs_groups: tuple[str, ...], logprob: bool
) -> FieldSpecs:
    """The fields a worker writes for each step; see `unilab.runtime.rollout` for their meaning."""
    fields: FieldSpecs = {f"obs_{g}": ((d,), "float32") for g, d in obs_dims.items()}
    for group in next_obs_groups:
        fields[f"next_obs_{group}"] = ((obs_dims[group],), "float32")
    fields["action"] = ((action_dim,), "float32")
    if logprob:
        fields["logprob"] = ((), "float32")
    fields["reward"] = ((), "float32")
    fields["terminated"] = ((), "float32")
    fields["truncated"] = ((), "float32")
    fields["episode_return"] = ((), "float32")
    fields["episode_length"] = ((), "float32")
    return fields


def info_fields(reward_terms: list[str], task_metrics: list[str]) -> FieldSpecs:
    """Per-step logging fields every chunk carries: each reward term and each task metric,
    in sorted name order (the learner logs their means; algorithms ignore them)."""
    fields: FieldSpecs = {}
    if reward_terms:
        fields["reward_terms"] = ((len(reward_terms),), "float32")
    if task_metrics:
        fields["task_metrics"] = ((len(task_metrics),), "float32")
    return fields


class Algorithm(abc.ABC):
    """Base of learners. Subclasses set `name`, build networks and implement `update`."""

    cfg: AlgoConfig
    actor: nn.Module
    off_policy: ClassVar[bool] = False
    next_obs_groups: ClassVar[tuple[str, ...]] = ("critic",)
    uses_logprob: ClassVar[bool] = True

    def __init__(
        self, cfg: AlgoConfig, obs_dims: dict[str, int], action_dim: int, device: torch.device
    ) -> None:
        self.cfg = cfg
        self.obs_dims = dict(obs_dims)
        self.action_dim = action_dim
        self.device = device
        self.critic_group = "critic" if "critic" in obs_dims else "policy"

    @classmethod
    def chunk_fields(cls, obs_dims: dict[str, int], action_dim: int) -> FieldSpecs:
        groups = tuple(g if g in obs_dims else "policy" for g in cls.next_obs_groups)
        return transition_fields(
            obs_dims, action_dim, tuple(dict.fromkeys(groups)), cls.uses_logprob
        )

    @staticmethod
    @abc.abstractmethod
    def build_actor(cfg: Any, obs_dims: dict[str, int], action_dim: int) -> nn.Module:
        """The module workers run: `act(obs) -> (action, logprob)`; `forward` is deterministic."""

    @abc.abstractmethod
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Learn from a batch of (T, N, ...) tensors on `self.device`; returns metrics."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything to resume, as weights_only-loadable values."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what state_dict returned."""


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
