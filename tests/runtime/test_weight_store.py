"""Weight store: reads across processes are never a mix of two versions, on both code paths
(seqlock alone: x86-64; seqlock + checksum: the default on arm64 and other weak memory
models), and the checksum alone holds when the seqlock's ordering cannot be trusted."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from runtime_procs import weight_reader, weight_reader_unsynchronized, weight_writer

from unilab.runtime import weights
from unilab.runtime.shm import SegmentOwner
from unilab.runtime.weights import WeightLayout, WeightStore, checksums_needed


@pytest.fixture
def owner() -> SegmentOwner:
    owner = SegmentOwner()
    yield owner
    owner.unlink_all()


def test_publish_and_read_in_one_process(owner: SegmentOwner) -> None:
    layout = WeightLayout.from_shapes({"w": (3, 4), "b": (4,), "obs_mean": (2,)})
    store = WeightStore.create(owner, layout)
    assert store.num_floats == 18 and store.version == 0
    assert store.read_if_newer(0) is None
    params = layout.flatten(
        {"w": np.ones((3, 4)), "b": np.arange(4.0), "obs_mean": np.array([5.0, 6.0])}
    )
    assert store.publish(params) == 1
    reader = WeightStore.attach(store.handle())
    got = reader.read_if_newer(0)
    assert got is not None and got[0] == 1
    named = layout.unflatten(got[1])
    assert named["b"].tolist() == [0, 1, 2, 3] and named["obs_mean"].tolist() == [5, 6]
    assert reader.read_if_newer(1) is None
    with pytest.raises(PermissionError, match="read-only"):
        reader.publish(params)
    assert store.publish(params * 2) == 2
    got = reader.read_if_newer(1)
    assert got is not None and got[0] == 2 and float(got[1][0]) == 2.0
    with pytest.raises(ValueError, match="expected shape"):
        store.publish(np.zeros(5, np.float32))
    with pytest.raises(KeyError, match="missing entries"):
        layout.flatten({"w": np.ones((3, 4))})


def test_reader_never_returns_a_buffer_being_written(owner: SegmentOwner) -> None:
    store = WeightStore.create(owner, 8)
    store.publish(np.full(8, 1, np.float32))
    store.publish(np.full(8, 2, np.float32))
    # Freeze a writer half way through version 4 (buffer 0) while LATEST says 4.
    store._control[1] += 1  # SEQ[0] odd: being written
    store._control[0] = 4
    with pytest.raises(TimeoutError, match="no whole copy"):
        store.read_if_newer(2, timeout=0.05)
    assert store.retries > 0
    store._control[1] += 1  # write finished, but the buffer holds version 2's data
    store._control[3] = 2
    assert store.read_if_newer(2) is None  # a whole copy, just not newer than what we have


@pytest.mark.parametrize("checksum", [False, True], ids=["seqlock", "seqlock+checksum"])
def test_concurrent_writer_never_yields_a_mix_of_versions(
    owner: SegmentOwner, checksum: bool
) -> None:
    # 64 KiB of weights: a copy takes long enough that a full-speed writer laps readers.
    store = WeightStore.create(owner, 16 * 1024, checksum=checksum)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    min_reads = 300
    jobs = [(weight_writer, (stop,))] + [(weight_reader, (1.0, min_reads, 20.0))] * 2
    pipes, procs = [], []
    for target, args in jobs:
        recv, send = ctx.Pipe(duplex=False)
        procs.append(ctx.Process(target=target, args=(store.handle(), *args, send)))
        pipes.append(recv)
        procs[-1].start()
        send.close()
    readers = [pipe.recv() for pipe in pipes[1:]]
    stop.set()
    (last_written,) = pipes[0].recv()
    for proc in procs:
        proc.join(10)
        assert proc.exitcode == 0
    assert last_written > 1000
    for reads, mixed, wrong_version, not_monotone, retries, last_read in readers:
        assert reads >= min_reads
        assert (mixed, wrong_version, not_monotone) == (0, 0, 0)
        assert last_read <= last_written
        print(f"reads {reads}, retries after a collision {retries}")
    print(f"writer published {last_written} versions")


def test_checksum_alone_rejects_every_torn_copy(owner: SegmentOwner) -> None:
    """What a weak memory model can do to the seqlock (data stores landing after the
    sequence stores) is at worst a reader that ignores it. Such a reader, verifying the
    checksum, never accepts a torn copy; the control reader beside it, without the
    checksum, does accept torn copies, so the check can see them."""
    store = WeightStore.create(owner, 16 * 1024, checksum=True)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    jobs = [
        (weight_writer, (stop,)),
        (weight_reader_unsynchronized, (1.0, True)),
        (weight_reader_unsynchronized, (1.0, False)),
    ]
    pipes, procs = [], []
    for target, args in jobs:
        recv, send = ctx.Pipe(duplex=False)
        procs.append(ctx.Process(target=target, args=(store.handle(), *args, send)))
        pipes.append(recv)
        procs[-1].start()
        send.close()
    verified, control = pipes[1].recv(), pipes[2].recv()
    stop.set()
    pipes[0].recv()
    for proc in procs:
        proc.join(10)
        assert proc.exitcode == 0
    accepted, torn, rejected = verified
    assert torn == 0 and accepted > 50 and rejected > 0, verified
    assert control[1] > 0, control  # (accepted, torn, rejected) without the checksum


def test_checksum_flag_travels_with_the_segment_and_catches_corruption(
    owner: SegmentOwner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(weights.platform, "machine", lambda: "arm64")
    assert checksums_needed()
    store = WeightStore.create(owner, 64)  # default on a weak memory model: checksums on
    reader = WeightStore.attach(store.handle())
    assert store.checksum and reader.checksum
    store.publish(np.full(64, 3.0, np.float32))
    store._buffers[1][7] = 4.0  # a store the reader sees although the sequence says done
    with pytest.raises(TimeoutError, match="no whole copy"):
        reader.read_if_newer(0, timeout=0.05)
    assert reader.checksum_rejects > 0
    monkeypatch.setattr(weights.platform, "machine", lambda: "x86_64")
    assert not checksums_needed()
    plain = WeightStore.create(owner, 64, name="plain")
    assert not WeightStore.attach(plain.handle()).checksum
