"""Ring buffer protocol in one process, then with real worker processes."""

from __future__ import annotations

import collections
import time

import numpy as np
import pytest
import torch

from unilab.runtime.chunk_spec import ChunkSpec
from unilab.runtime.poison import has_poison, poison_mask
from unilab.runtime.ring import RingBuffer
from unilab.runtime.ring_layout import H_STATE, SlotState
from unilab.runtime.ring_writer import RingWriter
from unilab.runtime.shm import list_segments
from unilab.runtime.source import ChunkSource, as_torch
from unilab.runtime.supervisor import Supervisor
from unilab.runtime.synthetic import check_chunk, synthetic_spec, synthetic_worker_main

SPEC = {"obs": ((3,), np.float32), "rgb": ((4, 4, 3), np.uint8), "reward": ((), "f4")}


@pytest.fixture
def ring() -> RingBuffer:
    ring = RingBuffer(SPEC, num_workers=2, envs_per_worker=[2, 5], chunk_len=4, slots_per_worker=3)
    yield ring
    ring.close()
    assert list_segments(ring.owner.prefix) == []


def test_fresh_ring_is_poisoned_and_free(ring: RingBuffer) -> None:
    assert isinstance(ring, ChunkSource)
    assert ring.slot_states() == [SlotState.FREE] * 6
    for slot in range(ring.num_slots):
        views = ring.views(slot)
        n_envs = ring.envs_per_worker[ring.worker_of(slot)]
        assert views["obs"].shape == (4, n_envs, 3)
        assert views["rgb"].shape == (4, n_envs, 4, 4, 3) and views["rgb"].dtype == np.uint8
        assert views["reward"].shape == (4, n_envs)
        for array in views.values():
            assert poison_mask(array).all()


def test_slot_round_trip_is_zero_copy(ring: RingBuffer) -> None:
    writer = RingWriter(ring.handle(1), generation=3)
    slot = writer.acquire_free_slot(timeout=1.0)
    assert ring.worker_of(slot) == 1 and ring.header(slot).state == SlotState.WRITING
    w = writer.views(slot)
    w["obs"][:] = 1.5
    w["rgb"][:] = 7
    w["reward"][:] = np.arange(4, dtype=np.float32)[:, None]
    assert ring.get_ready(timeout=0.0) == []  # not published yet
    assert writer.publish(slot, policy_version=9, step_count=20) == 0
    assert ring.get_ready(timeout=1.0) == [slot]
    header = ring.header(slot)
    assert (header.state, header.worker_id, header.generation) == (SlotState.READING, 1, 3)
    assert (header.seq, header.policy_version, header.step_count) == (0, 9, 20)
    views = ring.views(slot)
    assert views["obs"].tolist() == w["obs"].tolist()
    w["obs"][3, 4, 2] = -2.0  # two mappings of one segment: a write shows on the other side
    assert views["obs"][3, 4, 2] == -2.0
    assert not any(has_poison(a) for a in views.values())
    tensors = as_torch(views)
    tensors["reward"][0, 0] = 42.0  # torch writes land in the shared slot
    assert w["reward"][0, 0] == 42.0 and tensors["rgb"].dtype == torch.uint8
    ring.release(slot)
    assert ring.header(slot).state == SlotState.FREE
    assert ring.stats()["chunks_received"] == ring.stats()["chunks_released"] == 1


def test_waits_time_out(ring: RingBuffer) -> None:
    start = time.monotonic()
    assert ring.get_ready(timeout=0.2) == []
    assert time.monotonic() - start >= 0.18
    writer = RingWriter(ring.handle(0))
    held = [writer.acquire_free_slot(timeout=0.1) for _ in range(3)]
    assert sorted(held) == [0, 1, 2]
    ticks = []
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="no free ring slot"):
        writer.acquire_free_slot(timeout=0.3, on_wait=lambda: ticks.append(1), wait_tick_s=0.05)
    assert time.monotonic() - start >= 0.28
    assert len(ticks) >= 3  # heartbeats keep coming while a worker waits


def test_released_slot_wakes_a_waiting_writer(ring: RingBuffer) -> None:
    writer = RingWriter(ring.handle(0))
    for _ in range(3):
        writer.publish(writer.acquire_free_slot(timeout=0.1))
    slots = ring.get_ready(timeout=1.0)
    assert slots == [0, 1, 2]
    ring.release(slots[1])
    assert writer.acquire_free_slot(timeout=1.0) == 1


def test_protocol_misuse_is_refused(ring: RingBuffer) -> None:
    writer = RingWriter(ring.handle(0))
    slot = writer.acquire_free_slot(timeout=0.1)
    with pytest.raises(ValueError, match="not READING"):
        ring.release(slot)
    with pytest.raises(ValueError, match="does not belong to worker 0"):
        writer.views(4)
    writer.publish(slot)
    with pytest.raises(ValueError, match="not acquired"):
        writer.publish(slot)
    with pytest.raises(ValueError, match="slot must be in"):
        ring.views(99)
    with pytest.raises(ValueError, match="worker_id"):
        ring.handle(2)


def test_discard_dead_worker_slots(ring: RingBuffer) -> None:
    writer = RingWriter(ring.handle(1))
    unfinished = writer.acquire_free_slot(timeout=0.1)
    announced = writer.acquire_free_slot(timeout=0.1)
    writer.publish(announced, seq=0)
    silent = writer.acquire_free_slot(timeout=0.1)
    # A worker killed between marking the slot PUBLISHED and writing its id to the pipe:
    ring._headers[silent, H_STATE] = SlotState.PUBLISHED
    assert ring.discard_worker_slots(1) == 1
    assert ring.header(unfinished).state == SlotState.FREE
    assert ring.get_ready(timeout=0.5) == [announced, silent]  # each exactly once
    assert ring.get_ready(timeout=0.0) == []
    stats = ring.stats()
    assert stats["discarded_unpublished"] == 1 and stats["recovered_published"] == 1


def test_spec_and_shape_errors() -> None:
    with pytest.raises(ValueError, match="expected \\(shape, dtype\\)"):
        ChunkSpec({"obs": np.float32})
    with pytest.raises(ValueError, match="not supported"):
        ChunkSpec({"obs": ((3,), np.complex64)})
    with pytest.raises(ValueError, match="positive"):
        ChunkSpec({"obs": ((0,), np.float32)})
    with pytest.raises(ValueError, match="lists 1 workers"):
        RingBuffer(SPEC, num_workers=2, envs_per_worker=[3], chunk_len=4, slots_per_worker=2)
    with pytest.raises(ValueError, match="chunk_len"):
        RingBuffer(SPEC, num_workers=1, envs_per_worker=3, chunk_len=0, slots_per_worker=2)


def test_worker_processes_deliver_complete_ordered_chunks() -> None:
    ring = RingBuffer(synthetic_spec(), 3, [1, 4, 7], chunk_len=6, slots_per_worker=2,
                      debug_poison=True)  # fmt: skip
    sup = Supervisor(synthetic_worker_main, 3, ring=ring, config={"step_sleep_s": 0.0005},
                     hang_timeout_s=5.0)  # fmt: skip
    seqs: dict[int, list[int]] = collections.defaultdict(list)
    problems: list[str] = []
    with sup:
        deadline = time.monotonic() + 30
        while min((len(v) for v in seqs.values()), default=0) < 40 or len(seqs) < 3:
            assert time.monotonic() < deadline, dict(seqs)
            assert sup.poll() == []
            for slot in ring.get_ready(timeout=0.1):
                header = ring.header(slot)
                problems += check_chunk(header, ring.views(slot))
                assert header.generation == 0 and header.worker_id == ring.worker_of(slot)
                seqs[header.worker_id].append(header.seq)
                ring.release(slot)
    assert problems == []
    for worker_id, got in seqs.items():
        assert got == list(range(len(got))), f"worker {worker_id} out of order: {got}"
    assert sup.stats()["deaths"] == 0
    assert list_segments(sup.owner.prefix) == []


def test_checker_catches_a_half_written_chunk() -> None:
    ring = RingBuffer(synthetic_spec(), 1, 2, chunk_len=4, slots_per_worker=2, debug_poison=True)
    sup = Supervisor(synthetic_worker_main, 1, ring=ring,
                     config={"skip_last_step": True, "max_chunks": 3})  # fmt: skip
    found: list[str] = []
    with sup:
        deadline = time.monotonic() + 20
        while ring.stats()["chunks_received"] < 3:
            assert time.monotonic() < deadline
            sup.poll()
            for slot in ring.get_ready(timeout=0.1):
                found += check_chunk(ring.header(slot), ring.views(slot))
                ring.release(slot)
    assert any("poison visible" in p for p in found)
