"""The learner's chunk check: headers (worker, generation, sequence, policy version) and
finite floats, on a real ring; then through `LearnerRuntime.next_batch` with sim workers
whose policy diverged (NaN weights), which main learned from."""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest
from test_supervisor import make

from unilab.runtime.chunk_check import ChunkCheck
from unilab.runtime.ring import RingBuffer
from unilab.runtime.ring_writer import RingWriter

SPEC = {
    "obs": ((3,), np.float32),
    "episode_return": ((), np.float32),
    "rgb": ((2, 2, 3), np.uint8),
}


@pytest.fixture
def ring() -> RingBuffer:
    ring = RingBuffer(SPEC, num_workers=2, envs_per_worker=2, chunk_len=3, slots_per_worker=2)
    yield ring
    ring.close()


def _deliver(
    ring: RingBuffer, writer: RingWriter, seq: int, version: int = 1, **fill: float
) -> int:
    slot = writer.acquire_free_slot(timeout=1.0)
    views = writer.views(slot)
    views["obs"][:] = fill.get("obs", 0.5)
    views["episode_return"][:] = fill.get("episode_return", np.nan)  # NaN: no episode ended
    views["rgb"][:] = 255  # a white frame (also the uint8 poison byte): legal data
    writer.publish(slot, seq=seq, policy_version=version)
    (got,) = ring.get_ready(timeout=1.0)
    return got


def test_headers_and_values_are_checked(ring: RingBuffer) -> None:
    check = ChunkCheck(2, ring.worker_of)
    w0 = RingWriter(ring.handle(0), generation=0)

    def verdict(slot: int, newest: int = 5) -> str | None:
        why = check.problem(slot, ring.header(slot), ring.views(slot), newest)
        ring.release(slot)
        return why

    assert verdict(_deliver(ring, w0, seq=0)) is None
    assert verdict(_deliver(ring, w0, seq=1)) is None
    assert "expected 2" in str(verdict(_deliver(ring, w0, seq=1)))  # duplicate
    assert "expected 2" in str(verdict(_deliver(ring, w0, seq=3)))  # gap: this chunk only
    assert verdict(_deliver(ring, w0, seq=4)) is None  # the stream goes on after the gap
    assert "policy version 9" in str(verdict(_deliver(ring, w0, seq=5, version=9)))
    assert "policy version -1" in str(verdict(_deliver(ring, w0, seq=6, version=-1)))
    assert "'obs'" in str(verdict(_deliver(ring, w0, seq=7, obs=np.inf)))
    assert "'episode_return'" in str(verdict(_deliver(ring, w0, seq=8, episode_return=-np.inf)))
    assert verdict(_deliver(ring, w0, seq=9, episode_return=2.0)) is None
    # A replacement process (generation 1) may start anywhere; then generation 0 is stale.
    w0_new = RingWriter(ring.handle(0), generation=1)
    assert verdict(_deliver(ring, w0_new, seq=0)) is None
    assert "older than generation 1" in str(verdict(_deliver(ring, w0, seq=10)))
    # A header claiming another worker's slot.
    slot = _deliver(ring, w0_new, seq=1)
    ring._headers[slot, 2] = 1  # H_WORKER
    assert "belongs to worker 0" in str(verdict(slot))
    assert check.counts == {"ok": 5, "bad_header": 6, "bad_data": 2}


def test_nan_chunk_from_a_worker_process_is_dropped() -> None:
    learner = make(2, config={"step_sleep_s": 0.001, "nan_at_seq": 2, "max_chunks": 5})
    check = ChunkCheck(2, learner.ring.worker_of)
    ring, sup = learner.ring, learner.sup
    passed, dropped = [], []
    with sup:
        deadline = time.monotonic() + 30
        while len(passed) + len(dropped) < 10:
            assert time.monotonic() < deadline
            sup.poll()
            for slot in ring.get_ready(0.05):
                header = ring.header(slot)
                ok = check.accept(slot, header, ring.views(slot), newest=0)
                (passed if ok else dropped).append((header.worker_id, header.seq))
                ring.release(slot)
    assert sorted(dropped) == [(0, 2), (1, 2)]
    # The dropped chunk costs only itself: seq 3 and 4 of each worker pass.
    assert sorted(passed) == [(w, s) for w in range(2) for s in (0, 1, 3, 4)]


def test_learner_never_learns_from_a_diverged_policys_chunks() -> None:
    """Sim workers acting with a diverged policy write inf actions and NaN log-probs. main
    handed that batch to the update; now the chunk is dropped and counted, the learner
    reports the stall, and good weights bring finite batches back."""
    import torch

    from unilab.algos.base import actor_to_flat, info_fields
    from unilab.algos.registry import ALGORITHMS
    from unilab.config import compose, to_yaml
    from unilab.runtime.learner_side import LearnerRuntime, RuntimeStalled
    from unilab.tasks.registry import make_task
    from unilab.train.sim_worker import WORKER_TARGET

    cfg = compose(
        [
            "task=cartpole_balance",
            "algo=ppo",
            "sim.num_envs=8",
            "runtime.chunk_len=8",
            "runtime.debug_poison=true",
        ]
    )
    probe = make_task(cfg.task, num_envs=1, seed=0, sim_cfg=cfg.sim)
    entry = ALGORITHMS.get(cfg.algo.name)
    algo = entry.algo_cls(cfg.algo, probe.obs_dims, probe.action_dim, torch.device("cpu"))
    fields = {
        **entry.algo_cls.chunk_fields(probe.obs_dims, probe.action_dim),
        **info_fields(sorted(probe.reward_weights), sorted(probe.task_metrics())),
    }
    flat = actor_to_flat(algo.actor)
    runtime = LearnerRuntime(
        cfg, to_yaml(cfg), fields, flat.size, torch.device("cpu"), worker_target=WORKER_TARGET
    ).start()
    try:
        assert isinstance(runtime.source, RingBuffer) and runtime.source.debug_poison
        runtime.publish(flat)
        assert runtime.next_batch().policy_versions == [1]  # the workers are up
        # Version 2: the policy diverged (its action head outputs +inf; the worker's
        # Gaussian still samples, so actions are inf and log-probs NaN).
        diverged = copy.deepcopy(algo.actor)
        state = diverged.state_dict()
        state[[k for k in state if k.endswith("bias")][-1]].fill_(float("inf"))
        runtime.publish(actor_to_flat(diverged))
        runtime.wait_timeout_s = 3.0
        with pytest.raises(RuntimeStalled):
            runtime.next_batch()
        assert runtime.chunk_check.counts["bad_data"] >= 1
        assert "non-finite" in runtime.chunk_check.last_problem
        runtime.publish(flat)  # version 3: a sane policy again
        runtime.wait_timeout_s = 60.0
        batch = runtime.next_batch()
        assert batch.policy_versions == [3]
        for name, tensor in batch.tensors.items():
            if name != "episode_return":
                assert torch.isfinite(tensor).all(), name
    finally:
        runtime.close()
