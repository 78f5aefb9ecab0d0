"""Who owns shared memory: the creating process only; attachers never remove a segment."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from runtime_procs import drop_owner_lock

from unilab.runtime.shm import Segment, SegmentOwner, list_segments, sweep_stale_segments

HERE = Path(__file__).parent


def run_scenario(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HERE / "runtime_procs.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_worker_exit_never_removes_segment_and_owner_leaves_nothing() -> None:
    proc = run_scenario("shm-ownership")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["normal"] == {"exitcode": 0, "segment_exists": True, "child_wrote": True}
    assert report["exception"]["exitcode"] == 1
    assert report["exception"]["segment_exists"] and report["exception"]["child_wrote"]
    assert report["sigkill"]["exitcode"] == -9
    assert report["sigkill"]["segment_exists"] and report["sigkill"]["child_wrote"]
    assert report["before_unlink"] == [f"{report['prefix']}_data"]
    assert report["after_unlink"] == []
    assert list_segments(report["prefix"]) == []
    assert "resource_tracker" not in proc.stderr
    assert "leaked" not in proc.stderr


def test_owner_unlinks_all_and_is_idempotent() -> None:
    owner = SegmentOwner()
    a = owner.create("a", 4096)
    owner.create("b", 10_000)
    assert list_segments(owner.prefix) == [f"{owner.prefix}_a", f"{owner.prefix}_b"]
    view = a.array(np.float32, (16,), 64)  # a live view must not block unlinking
    view[:] = 3.0
    owner.unlink_all()
    owner.unlink_all()
    assert list_segments(owner.prefix) == []
    assert float(view.sum()) == 48.0  # the mapping outlives the name


def test_created_segment_is_prefaulted_and_attachable() -> None:
    owner = SegmentOwner()
    try:
        seg = owner.create("x", 1 << 16)
        other = Segment.attach(seg.name, seg.size)
        other.array(np.int64, (4,), 0)[:] = [1, 2, 3, 4]
        assert seg.array(np.int64, (4,), 0).tolist() == [1, 2, 3, 4]
        assert int(seg.array(np.uint8, (1 << 16,), 0)[32:].max()) == 0
        with pytest.raises(ValueError, match="exceeds segment"):
            seg.array(np.float64, (1 << 14,), 8)
        with pytest.raises(ValueError, match="expected at least"):
            Segment.attach(seg.name, 1 << 20)
        other.close()
    finally:
        owner.unlink_all()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Segment.attach(f"{owner.prefix}_x", 1 << 16)


def test_bad_names_and_sizes_are_refused() -> None:
    owner = SegmentOwner()
    with pytest.raises(ValueError, match="purpose"):
        owner.create("Bad-Name", 64)
    with pytest.raises(ValueError, match="positive"):
        owner.create("ok", 0)
    owner.create("ok", 64)
    with pytest.raises(ValueError, match="already exists"):
        owner.create("ok", 64)
    with pytest.raises(ValueError, match="must start with"):
        SegmentOwner(prefix="other_1_ab")
    owner.unlink_all()


def test_sweep_removes_segments_of_dead_owners_only() -> None:
    """(More cases: test_shm_hygiene.py.) A dead owner's segments go, a live one's stay."""
    child = mp.get_context("spawn").Process(target=os.getpid)
    child.start()
    child.join()
    assert child.pid is not None
    dead = SegmentOwner(prefix=f"unilab_{child.pid}_abcdef")
    dead.create("ring", 4096)
    drop_owner_lock(dead)  # as if its process had died
    live = SegmentOwner()
    live.create("ring", 4096)
    try:
        sweep_stale_segments()  # (a concurrent run's sweep may get there first: same result)
        assert list_segments(dead.prefix) == []
        assert list_segments(live.prefix) == [f"{live.prefix}_ring"]
    finally:
        live.unlink_all()
        dead.unlink_all()
