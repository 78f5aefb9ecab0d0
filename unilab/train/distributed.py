"""Several learner processes under `torchrun`: who is who, and what they agree on.

    torchrun --standalone --nproc-per-node 2 -m unilab.cli train task=cartpole_balance

torchrun sets RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous address; `init_world` joins
the process group (NCCL when the learner is on a GPU, gloo on CPU). Each rank runs its own
sim workers (`sim.num_envs` and `runtime.num_workers` are per rank) and learns on its shard
of every batch with the collectives of `unilab.algos.data_parallel`; rank 0 is the `Runner`
(run directory, logging, checkpoints, hooks, export), the others run
`unilab.train.follower.follow`. Every iteration starts with `agree`: all ranks go on, or all
stop (budget, wall time, a signal on any rank). Nothing crosses between ranks but tensors
(no pickled objects): text goes as uint8 tensors.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field

import torch

from unilab.algos.base import Algorithm
from unilab.algos.data_parallel import SINGLE, DataParallel, TorchDataParallel
from unilab.config.errors import ConfigError

COLLECTIVE_TIMEOUT_S = 600
"""A rank that waits this long in a collective fails (a peer died or hung)."""


@dataclass
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    """Where collective tensors live (the learner device: NCCL wants GPU tensors)."""
    dp: DataParallel = SINGLE

    @property
    def active(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def attach(self, algo: Algorithm) -> None:
        """Make `algo` data-parallel and give it rank 0's parameters and buffers."""
        if not self.active:
            return
        if not algo.supports_data_parallel:
            raise ConfigError(self.unsupported(algo.cfg.name))
        algo.data_parallel = self.dp
        with torch.no_grad():
            for module in _modules(algo):
                for tensor in [*module.parameters(), *module.buffers()]:
                    self.dp.broadcast_(tensor.data)

    @staticmethod
    def unsupported(algo: str) -> str:
        return (
            f"algo={algo} has no data-parallel update; with several learner processes "
            "(torchrun) use algo=ppo or algo=appo"
        )

    def agree(self, go_on: bool) -> bool:
        """True only when every rank says go on (one all-reduce)."""
        if not self.active:
            return go_on
        votes = torch.tensor([1 if go_on else 0], dtype=torch.int64, device=self.device)
        return int(self.dp.all_sum(votes).item()) == self.size

    def broadcast_int(self, value: int) -> int:
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        return int(self.dp.broadcast_(t).item())

    def broadcast_text(self, text: str) -> str:
        """Rank 0's `text` on every rank (UTF-8 in a uint8 tensor)."""
        if not self.active:
            return text
        data = text.encode() if self.is_main else b""
        size = self.broadcast_int(len(data))
        buf = torch.zeros(size, dtype=torch.uint8, device=self.device)
        if self.is_main and size:
            buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return bytes(self.dp.broadcast_(buf).cpu().tolist()).decode()

    def share_rng(self) -> None:
        """Rank 0's torch RNG state everywhere: minibatch permutations must match."""
        if self.active:
            state = torch.get_rng_state().to(self.device)
            torch.set_rng_state(self.dp.broadcast_(state).cpu())

    def close(self) -> None:
        if self.active:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.barrier()  # no rank tears gloo down while a peer still talks to it
                dist.destroy_process_group()
                global _GROUP_TORN_DOWN
                _GROUP_TORN_DOWN = True


SINGLE_WORLD = World()

_GROUP_TORN_DOWN = False


def end_process_after_group(code: int) -> None:
    """In a process whose gloo/NCCL group `World.close` tore down, end now with `code`
    (flushing stdio and logging first) instead of returning to the interpreter's exit.

    Why: with torch 2.13 a torchrun rank aborts in C++ teardown after its work is done and
    its group destroyed ("terminate called without an active exception", SIGABRT, no
    Python frame) in about 1 run in 10 on a loaded 2-core box; torchrun then reports the
    run failed and SIGTERMs the other ranks. `os._exit` skips that teardown. A process
    that never joined a group returns normally."""
    if not _GROUP_TORN_DOWN:
        return
    import contextlib
    import logging
    import sys

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing to flush
            stream.flush()
    os._exit(code)


def env_world_size() -> int:
    """WORLD_SIZE as torchrun sets it (1 when not under torchrun)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ConfigError(
            f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not an integer (torchrun sets it)"
        ) from None


def init_world(device: torch.device) -> World:
    """Join torchrun's process group (a one-process World outside torchrun)."""
    size = env_world_size()
    if size <= 1:
        return World(device=device)
    import torch.distributed as dist

    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    return World(rank, size, local_rank, device, TorchDataParallel(rank, size))


def _modules(algo: Algorithm) -> list[torch.nn.Module]:
    return [m for m in vars(algo).values() if isinstance(m, torch.nn.Module)]
