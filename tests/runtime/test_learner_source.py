"""The learner runtime reads from whatever `ChunkSource` it is given (the seam a remote
source plugs into) and exposes the host-side batch as `host_batch`."""

from __future__ import annotations

import numpy as np
import torch

from unilab.config import compose
from unilab.config.compose import to_yaml
from unilab.runtime.learner_side import LearnerRuntime
from unilab.runtime.ring import RingBuffer
from unilab.runtime.ring_writer import RingWriter
from unilab.runtime.shm import list_segments

FIELDS = {
    "obs_policy": ((3,), "float32"),
    "reward": ((), "float32"),
    "episode_return": ((), "float32"),
}


def test_an_injected_source_feeds_the_batch_and_no_local_worker_starts() -> None:
    cfg = compose(["sim.num_envs=4", "runtime.chunk_len=5", "runtime.num_workers=1"])
    ring = RingBuffer(
        {k: (s, np.dtype(d)) for k, (s, d) in FIELDS.items()},
        num_workers=1,
        envs_per_worker=4,
        chunk_len=5,
        slots_per_worker=2,
    )
    runtime = LearnerRuntime(
        cfg,
        to_yaml(cfg),
        FIELDS,
        actor_floats=7,
        device=torch.device("cpu"),
        worker_target="nowhere:never_started",
        source=ring,
    ).start()
    try:
        assert runtime.supervisor is None and runtime.source is ring
        version = runtime.publish(np.zeros(7, np.float32))
        writer = RingWriter(ring.handle(0))
        slot = writer.acquire_free_slot(timeout=1.0)
        views = writer.views(slot)
        views["obs_policy"][:] = np.arange(60, dtype=np.float32).reshape(5, 4, 3)
        views["reward"][:] = 2.5
        views["episode_return"][:] = np.nan
        writer.publish(slot, policy_version=version, step_count=20)
        writer.close()
        batch = runtime.next_batch()
        assert batch.env_steps == 20 and batch.staleness == [0]
        expected = np.arange(60, dtype=np.float32).reshape(5, 4, 3)
        assert np.array_equal(batch.tensors["obs_policy"].numpy(), expected)
        assert np.array_equal(runtime.host_batch["obs_policy"], expected)
        assert (runtime.host_batch["reward"] == 2.5).all()
        assert runtime.supervisor_stats() == {}
    finally:
        runtime.close()
    assert list_segments(ring.owner.prefix) == []
