"""The collective operations a data-parallel update needs (docs/decisions/0072).

With `W` learner processes, rank `r` holds env columns `[r*n, (r+1)*n)` of the combined
`(T, W*n)` batch. An update then gives the same parameters as one process on the combined
batch: every rank draws the same minibatch permutation over the combined sample indices
(same seed, same RNG stream), computes the loss *sum* over the part of each minibatch it
holds divided by the combined minibatch size, and gradients are summed over ranks before
clipping and the optimizer step. Batch statistics (observation normalizer, advantage
normalization, KL for the adaptive learning rate) are summed over ranks the same way.

`SINGLE` (one process) does nothing; `TorchDataParallel` uses `torch.distributed`
(gloo on CPU, NCCL on GPUs), already initialised by the caller (`unilab.train.distributed`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class DataParallel:
    """One process: every collective is the identity."""

    rank: int = 0
    world_size: int = 1

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over ranks, in place; returns it."""
        return tensor

    def sum_grads(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum every parameter's gradient over ranks (one flat all-reduce)."""

    def broadcast_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Overwrite `tensor` with rank 0's, in place; returns it."""
        return tensor

    def local_indices(self, combined: torch.Tensor, steps: int, local_envs: int) -> torch.Tensor:
        """The rows of this rank's flattened `(T, n)` shard that the combined flat indices
        `combined` (over `(T, W*n)`, row-major as `reshape(-1)`) name, in order."""
        return combined


class TorchDataParallel(DataParallel):
    def __init__(self, rank: int, world_size: int) -> None:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised (init_process_group)")
        self.rank = rank
        self.world_size = world_size
        self._dist = dist

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        self._dist.all_reduce(tensor, op=self._dist.ReduceOp.SUM)
        return tensor

    def sum_grads(self, params: Iterable[torch.nn.Parameter]) -> None:
        params = list(params)
        grads = [
            p.grad.reshape(-1) if p.grad is not None else torch.zeros_like(p).reshape(-1)
            for p in params
        ]
        flat = torch.cat(grads)
        self.all_sum(flat)
        offset = 0
        for p in params:
            size = p.numel()
            p.grad = flat[offset : offset + size].view_as(p).clone()
            offset += size

    def broadcast_(self, tensor: torch.Tensor) -> torch.Tensor:
        self._dist.broadcast(tensor, src=0)
        return tensor

    def local_indices(self, combined: torch.Tensor, steps: int, local_envs: int) -> torch.Tensor:
        all_envs = local_envs * self.world_size
        step, env = combined // all_envs, combined % all_envs
        lo = self.rank * local_envs
        mine = (env >= lo) & (env < lo + local_envs)
        return step[mine] * local_envs + (env[mine] - lo)


SINGLE = DataParallel()
