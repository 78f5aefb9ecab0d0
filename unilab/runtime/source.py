"""The interface a learner reads experience chunks through.

`RingBuffer` (shared memory, workers on this machine) is the first implementation; a remote
source (e.g. Ray actors on other hosts) implements the same methods, so algorithms never
depend on where chunks come from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from unilab.runtime.chunk_spec import ChunkSpec
from unilab.runtime.ring_layout import SlotHeader

if TYPE_CHECKING:
    import torch


@runtime_checkable
class ChunkSource(Protocol):
    spec: ChunkSpec

    def get_ready(self, timeout: float) -> list[int]:
        """Ids of chunks ready to read, oldest first; [] after `timeout` seconds."""
        ...

    def header(self, slot: int) -> SlotHeader:
        """Who made the chunk: worker, generation, sequence number, policy version, steps."""
        ...

    def views(self, slot: int) -> dict[str, np.ndarray]:
        """Field name -> (T, n_envs, *shape) array; valid until `release(slot)`."""
        ...

    def release(self, slot: int) -> None:
        """Done reading; the chunk's memory goes back to its producer."""
        ...

    def stats(self) -> dict[str, int]: ...


def as_torch(views: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Zero-copy torch tensors over numpy views (torch is imported only when called)."""
    import torch

    return {name: torch.from_numpy(array) for name, array in views.items()}
