"""/dev/shm hygiene: names carry user and run, the sweep removes only this user's segments
of dead runs (never a live run's, never another user's, never crashes), and a SIGTERM in
the set-up window (segments made, no handler yet) leaves nothing behind."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_procs import drop_owner_lock, hold_segments

from unilab.runtime import shm
from unilab.runtime.shm import (
    SegmentOwner,
    base36,
    list_segments,
    owner_prefix,
    sweep_stale_segments,
)

HERE = Path(__file__).parent
SPAWN = mp.get_context("spawn")
pytestmark = pytest.mark.skipif(not shm.SHM_DIR.is_dir(), reason="needs /dev/shm (Linux)")


def _dead_pid() -> int:
    child = SPAWN.Process(target=os.getpid)
    child.start()
    child.join()
    assert child.pid is not None
    return child.pid


def _held_by_child(prefix: str | None) -> tuple[mp.process.BaseProcess, list[str], object]:
    recv, send = SPAWN.Pipe(duplex=False)
    release = SPAWN.Event()
    proc = SPAWN.Process(target=hold_segments, args=(prefix, send, release))
    proc.start()
    send.close()
    assert recv.poll(60), "child did not create its segments"
    return proc, recv.recv(), release


def test_names_carry_user_pid_and_run_id() -> None:
    owner = SegmentOwner(run_id="r42")
    try:
        seg = owner.create("weights", 64)
        assert seg.name == f"unilab_{base36(os.getuid())}_{base36(os.getpid())}_r42_weights"
        assert seg.name.startswith(owner_prefix())
        assert len(seg.name) <= shm.MAX_NAME_CHARS
    finally:
        owner.unlink_all()
    with pytest.raises(ValueError, match="run_id"):
        SegmentOwner(run_id="Bad_Id")


def test_sweep_spares_live_runs_even_when_their_pid_looks_dead() -> None:
    """A live owner in another PID namespace (a container sharing /dev/shm) has a pid we
    cannot see. main's sweep went by the pid alone and unlinked such a run's memory; the
    owner's flock now says it is alive."""
    dead = _dead_pid()
    proc, names, release = _held_by_child(f"unilab_{dead}_abcdef")  # main's name format
    try:
        swept = sweep_stale_segments()
        assert not set(names) & set(swept)
        assert sorted(list_segments(f"unilab_{dead}_abcdef")) == sorted(names)
    finally:
        release.set()  # type: ignore[attr-defined]
        proc.join(30)
    # Now the owner is gone for real (exited without unlinking): the next sweep removes them.
    assert sorted(set(names) & set(sweep_stale_segments())) == sorted(names)
    assert list_segments(f"unilab_{dead}_abcdef") == []


def test_sweep_removes_a_sigkilled_owners_segments() -> None:
    proc, names, _ = _held_by_child(None)
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    sweep_stale_segments()  # (a concurrent run's sweep may get there first: same result)
    assert not set(names) & set(list_segments())


def test_sweep_never_touches_another_users_segment_and_survives_permission_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dead = _dead_pid()
    other_uid = os.getuid() + 4242
    names = [
        f"unilab_{dead}_abc123_ring",  # main's format: no uid in the name, file not ours
        f"unilab_{base36(other_uid)}_{base36(dead)}_abc123_ring",  # another user's run
    ]
    import _posixshmem

    for name in names:
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode=0o600)
        if os.getuid() == 0:
            os.fchown(fd, other_uid, -1)  # as root we can make it someone else's
        os.close(fd)
    try:
        swept = sweep_stale_segments()
        if os.getuid() == 0:
            assert not set(names) & set(swept)
            assert set(names) <= set(list_segments())
        # A segment of ours that we may not unlink (sticky /dev/shm, another user's file as
        # seen by a non-root sweep): no crash, nothing reported as removed.
        mine = SegmentOwner(prefix=f"unilab_{_dead_pid()}_def456")
        mine.create("ring", 64)
        drop_owner_lock(mine)  # as if its process had died

        def refuse(name: str) -> None:
            raise PermissionError(1, "Operation not permitted", name)

        monkeypatch.setattr(shm._posixshmem, "shm_unlink", refuse)
        assert f"{mine.prefix}_ring" not in sweep_stale_segments()
        monkeypatch.undo()
        mine.unlink_all()
    finally:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                _posixshmem.shm_unlink("/" + name)


def test_sigterm_in_the_setup_window_leaves_nothing() -> None:
    """main: SIGTERM's default action killed the process before the learner installed its
    handler, skipping every cleanup, and the segments stayed until another run swept."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "runtime_procs.py"), "setup-window"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("CREATED "), proc.stderr.read() if proc.stderr else line
    names = json.loads(line.split(" ", 1)[1])
    assert set(names) <= set(list_segments())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert not set(names) & set(list_segments())
