"""What every learner provides to the training loop.

The runtime never looks inside an algorithm: it asks which transition fields a chunk must
carry (`chunk_fields`), builds the actor in each worker (`build_actor`), publishes the
learner's actor weights (`actor`), and hands over batches of chunks (`update`).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import torch

from unilab.algos.data_parallel import SINGLE, DataParallel
from unilab.config.schema import AlgoConfig
from unilab.runtime.fields import FieldSpecs, info_fields, transition_fields
from unilab.runtime.flat_weights import actor_to_flat, flat_to_actor
from unilab.runtime.torch_policy import PolicyModule

__all__ = [
    "Algorithm",
    "FieldSpecs",
    "actor_to_flat",
    "flat_to_actor",
    "info_fields",
    "transition_fields",
]


class Algorithm(abc.ABC):
    """Base of learners. Subclasses set `name`, build networks and implement `update`."""

    cfg: AlgoConfig
    actor: PolicyModule
    off_policy: ClassVar[bool] = False
    offline: ClassVar[bool] = False
    """Learns from an episode store, not from rollouts: the Runner runs its offline loop
    (`unilab.train.offline_runner`) and starts no sim workers."""
    learns_policy: ClassVar[bool] = True
    """False for learners whose product is not a policy (the world model): no mid-run
    evaluation, export or play of the run."""
    shaped_obs: ClassVar[bool] = False
    """`obs_dims` (of `__init__` and `build_actor`) holds every observation group's shape,
    images and instruction ids included (`Task.observation_spec()`), not only the widths of
    the float32 vector groups."""
    next_obs_groups: ClassVar[tuple[str, ...]] = ("critic",)
    uses_logprob: ClassVar[bool] = True
    supports_data_parallel: ClassVar[bool] = False
    """True when `update` gives one process's result on the combined batch with several
    learner processes (`unilab.algos.data_parallel`)."""
    data_parallel: DataParallel = SINGLE
    """Collectives over learner processes; the distributed trainer sets it."""

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

    @classmethod
    def rollout_fields(cls, cfg: Any, shapes: Any) -> FieldSpecs:
        """The fields each rollout chunk carries for this learner, from its config and the
        task's shapes (`unilab.train.runner.TaskShapes`). Default: `chunk_fields` of the
        vector groups; learners whose chunks hold more (a flow chain, instruction ids)
        override it."""
        return cls.chunk_fields(shapes.obs_dims, shapes.action_dim)

    @classmethod
    def rollout_n_act(cls, cfg: Any) -> int | None:
        """Actions a sim worker executes of each chunk before re-planning (None: all H of
        the chunk; H = 1 for the MLP actors)."""
        return None

    @staticmethod
    @abc.abstractmethod
    def build_actor(cfg: Any, obs_dims: dict[str, int], action_dim: int) -> PolicyModule:
        """The policy workers run and export writes (`unilab.runtime.policy.Policy`); build it
        through `unilab.algos.build.build_policy`, which also loads weights."""

    @abc.abstractmethod
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Learn from a batch of (T, N, ...) tensors on `self.device`; returns metrics."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything to resume, as weights_only-loadable values."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what state_dict returned."""
