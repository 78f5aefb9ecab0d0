"""`replace_dir`: a finished directory takes the place of an old one with no moment where
the target is missing or half deleted (LeRobot export with overwrite, repair's rebuild).

The full LeRobot export path (a failure injected mid-export with `overwrite=True`) runs in
`make test-lerobot`: tests/data_lerobot/test_lerobot_export_overwrite.py.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from unilab.data import dirswap
from unilab.data.dirswap import replace_dir

FORK = mp.get_context("fork")
FILES = 150


def _make(path: Path, tag: str) -> None:
    path.mkdir(parents=True)
    for i in range(FILES):
        (path / f"part{i:04d}.txt").write_text(f"{tag} {i}\n")


def _state(path: Path) -> str:
    """'old' / 'new' when `path` is one whole version, else a description of the damage."""
    if not path.is_dir():
        return "missing"
    names = sorted(os.listdir(path))
    if len(names) != FILES:
        return f"partial ({len(names)} of {FILES} files)"
    tags = {(path / n).read_text().split()[0] for n in names}
    return tags.pop() if len(tags) == 1 else f"mixed {sorted(tags)}"


def _replace_like_main(new: Path, target: Path) -> None:
    """What `export_to_lerobot(overwrite=True)` did on main once the export was done."""
    shutil.rmtree(target)
    os.rename(new, target)


def test_replace_dir_cases(tmp_path: Path) -> None:
    target = tmp_path / "ds"
    _make(tmp_path / "a", "a")
    replace_dir(tmp_path / "a", target)  # no target yet: a rename
    assert _state(target) == "a" and not (tmp_path / "a").exists()
    _make(tmp_path / "b", "b")
    assert replace_dir(tmp_path / "b", target) is None
    assert _state(target) == "b" and sorted(os.listdir(tmp_path)) == ["ds"]
    _make(tmp_path / "c", "c")
    backup = tmp_path / "backups" / "ds"
    assert replace_dir(tmp_path / "c", target, backup=backup) == backup
    assert _state(target) == "c" and _state(backup) == "b"
    _make(tmp_path / "d", "d")
    with pytest.raises(FileExistsError, match="not overwriting"):
        replace_dir(tmp_path / "d", target, backup=backup)
    assert _state(target) == "c" and _state(tmp_path / "d") == "d"
    with pytest.raises(FileNotFoundError):
        replace_dir(tmp_path / "nope", target)


def _signal_then(started: Any, swap: Callable[[Path, Path], None], new: Path, target: Path) -> None:
    started.set()
    swap(new, target)


def _kill_during(
    swap: Callable[[Path, Path], None], work: Path, runs: int, seed: int, until_bad: bool = False
) -> list[str]:
    """SIGKILL `swap(new, target)` at random points; the target's state after each run
    (with `until_bad`, stop at the first state that is not one whole version)."""
    rng = np.random.default_rng(seed)
    probe_new, probe_target = work / "probe_new", work / "probe_target"
    _make(probe_new, "new")
    _make(probe_target, "old")
    t0 = time.perf_counter()
    swap(probe_new, probe_target)
    full = time.perf_counter() - t0
    states = []
    for run in range(runs):
        new, target = work / f"new{run}", work / f"target{run}"
        _make(new, "new")
        _make(target, "old")
        started = FORK.Event()
        proc = FORK.Process(target=_signal_then, args=(started, swap, new, target))
        proc.start()
        # Time the kill from the swap's start, not the fork's (process start-up can take
        # longer than the whole swap, and every kill would then land before it began).
        assert started.wait(10)
        time.sleep(float(rng.uniform(0.0, 1.2 * full)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        states.append(_state(target))
        if until_bad and states[-1] not in ("old", "new"):
            break
    return states


def test_killed_replace_always_leaves_one_whole_version(tmp_path: Path) -> None:
    if dirswap._RENAMEAT2 is None:
        pytest.skip("renameat2(RENAME_EXCHANGE) not available: the two-rename fallback is used")
    states = _kill_during(replace_dir, tmp_path, runs=8, seed=3)
    assert set(states) <= {"old", "new"}, states


def test_control_main_sequence_is_caught_by_the_same_check(tmp_path: Path) -> None:
    """The check above can fail: main's rmtree-then-rename, killed at the same random
    points, leaves the target missing or half deleted."""
    states = _kill_during(_replace_like_main, tmp_path, runs=40, seed=3, until_bad=True)
    assert set(states) - {"old", "new"}, states


def test_fallback_without_exchange_keeps_the_old_version_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where RENAME_EXCHANGE is missing (macOS, old glibc) two renames are used; a kill
    between them leaves the old version whole under its backup name, never deleted."""
    monkeypatch.setattr(dirswap, "_RENAMEAT2", None)
    target, backup = tmp_path / "ds", tmp_path / "ds.bak"
    _make(target, "old")
    _make(tmp_path / "new", "new")
    real_rename = os.rename
    calls = []

    def rename_then_die(src: object, dst: object) -> None:
        calls.append((src, dst))
        real_rename(src, dst)  # type: ignore[arg-type]
        if len(calls) == 1:
            raise KeyboardInterrupt  # stands for a kill between the two renames

    monkeypatch.setattr(os, "rename", rename_then_die)
    with pytest.raises(KeyboardInterrupt):
        replace_dir(tmp_path / "new", target, backup=backup)
    assert _state(backup) == "old" and _state(tmp_path / "new") == "new"
