"""How much shared memory a ring takes, said before it is made, and the limit on it.

Camera images dominate a vision run's ring: one env step of two 64 px RGB cameras is 24 KiB
against ~0.3 KiB of vectors, and the ring holds `num_workers x slots_per_worker x
chunk_len x envs_per_worker` of them. `ring_size` computes the exact layout size (the same
`RingLayout` the ring is built from); `check_ring_size` refuses one over the configured
limit with a message naming the knobs that shrink it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from unilab.config.errors import ConfigError
from unilab.runtime.chunk_spec import ChunkSpec
from unilab.runtime.ring_layout import RingLayout, RingParams

MIB = 1024 * 1024


@dataclass(frozen=True)
class RingSize:
    total_bytes: int
    """The shared segment: headers plus every slot (aligned)."""
    bytes_per_step_env: int
    image_bytes_per_step_env: int
    """Of bytes_per_step_env, the uint8 (H, W, C) fields'."""
    num_workers: int
    slots_per_worker: int
    chunk_len: int
    envs_per_worker: tuple[int, ...]

    @property
    def mib(self) -> float:
        return self.total_bytes / MIB

    def describe(self) -> str:
        envs = set(self.envs_per_worker)
        env_text = str(envs.pop()) if len(envs) == 1 else str(list(self.envs_per_worker))
        images = (
            f", images {self.image_bytes_per_step_env / 1024:.1f} KiB of it"
            if self.image_bytes_per_step_env
            else ""
        )
        workers = "worker" if self.num_workers == 1 else "workers"
        return (
            f"ring buffer {self.mib:.1f} MiB: {self.num_workers} {workers} x "
            f"{self.slots_per_worker} slots x {self.chunk_len} steps x {env_text} envs x "
            f"{self.bytes_per_step_env / 1024:.1f} KiB per env step{images}"
        )


def ring_size(
    spec: ChunkSpec | Mapping[str, Any],
    num_workers: int,
    envs_per_worker: int | Sequence[int],
    chunk_len: int,
    slots_per_worker: int,
) -> RingSize:
    """The size of the ring these arguments would build (see `RingBuffer`)."""
    chunk = spec if isinstance(spec, ChunkSpec) else ChunkSpec(spec)
    params = RingParams.build(chunk, num_workers, envs_per_worker, chunk_len, slots_per_worker)
    images = sum(
        f.bytes_per_step_env
        for f in chunk.values()
        if f.dtype.kind == "u" and f.dtype.itemsize == 1 and len(f.shape) == 3
    )
    return RingSize(
        RingLayout(params).total_bytes,
        chunk.bytes_per_step_env,
        images,
        params.num_workers,
        params.slots_per_worker,
        params.chunk_len,
        params.envs_per_worker,
    )


def check_ring_size(size: RingSize, max_mb: float, limit_name: str, knobs: str) -> None:
    """A ConfigError when the ring exceeds `max_mb` MiB; `limit_name` is the setting that
    holds the limit, `knobs` the settings that shrink the ring (named in the message)."""
    if size.total_bytes > max_mb * MIB:
        raise ConfigError(
            f"{size.describe()} exceeds {limit_name}={max_mb:g}; lower {knobs}, or raise "
            f"{limit_name}"
        )
