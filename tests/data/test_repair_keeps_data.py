"""`unilab data repair` never deletes data that still reads: the CLI on a store with one
array's metadata removed, `--dry-run`, `--no-backup`, and repairs SIGKILLed at random
points (the mid-repair row of docs/fault-matrix.md)."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from store_helpers import make_episode, make_meta, snapshot

from unilab.cli import main as unilab_main
from unilab.data import EpisodeStore, repair, validate
from unilab.data.errors import MissingDataError

FORK = mp.get_context("fork")


def main(argv: list[str]) -> int:
    """`unilab data <argv>`."""
    return unilab_main(["data", *argv])


UNILAB = Path(sys.executable).with_name("unilab")


def _assert_episodes(store: EpisodeStore, kept: list[int], skip: tuple[str, ...] = ()) -> None:
    assert len(store) == len(kept)
    for new, k in enumerate(kept):
        names = [n for n in store.schema.names if n not in skip]
        got = store.episode(new, names)
        for name in names:
            np.testing.assert_array_equal(got[name], make_episode(k)[name], err_msg=name)
        assert store.meta(new) == make_meta(k)


def test_cli_repair_after_rm_action_metadata_keeps_every_episode(filled_store: Path) -> None:
    """`rm store/action/zarr.json; unilab data repair store`: main recreated `action` empty
    and dropped all 10 episodes of every field; now the metadata is rebuilt from the schema
    and nothing is lost."""
    (filled_store / "action" / "zarr.json").unlink()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [str(UNILAB), "data", "repair", str(filled_store)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert "rebuild the missing metadata of 'action'" in run.stdout
    assert "10 episode(s)" in run.stdout
    assert validate(filled_store, deep=True) == []
    with EpisodeStore.open(filled_store) as store:
        _assert_episodes(store, list(range(10)))


def test_dry_run_changes_nothing_and_no_backup_keeps_no_copies(
    filled_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.rmtree(filled_store / "action")  # the whole field: metadata and chunks
    (filled_store / "reward/c/1").unlink()  # frames 32..63 of one other field
    leftover = filled_store / "obs/policy/c/zarr.0a1b2c3d.partial"
    leftover.write_bytes(b"half")
    before = snapshot(filled_store)
    assert main(["repair", str(filled_store), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run, nothing changed" in out
    assert "quarantine field 'action'" in out and "quarantine 4 episode(s)" in out
    assert snapshot(filled_store) == before
    assert sorted(p.name for p in filled_store.parent.iterdir()) == [filled_store.name]

    assert main(["repair", str(filled_store), "--no-backup"]) == 0
    out = capsys.readouterr().out
    assert "backup" not in out and "quarantine:" in out
    siblings = sorted(p.name for p in filled_store.parent.iterdir())
    assert siblings == [filled_store.name, f"{filled_store.name}.quarantine"]
    with EpisodeStore.open(filled_store) as store:
        with pytest.raises(MissingDataError, match="'action'"):
            store.read("action")
        # reward chunk 1 (frames 32..63) touched episodes 4..7; the rest keep every field
        _assert_episodes(store, [0, 1, 2, 3, 8, 9], skip=("action",))


def _damage(path: Path) -> None:
    """A missing field and a missing chunk in the middle of another one."""
    shutil.rmtree(path / "token")
    (path / "obs/policy/c/3/0").unlink()  # frames 48..63: episodes 6 and 7


def _repair_child(path: str) -> None:
    repair(path)


def _kill_repairs(template: Path, work: Path, runs: int, seed: int) -> int:
    """Repair copies of a damaged store, SIGKILLed at random points, then repair again.
    Returns how many kills landed before the repair finished."""
    kept = [0, 1, 2, 3, 4, 5, 8, 9]
    probe = work / "probe.zarr"
    shutil.copytree(template, probe)
    t0 = time.perf_counter()
    repair(probe)
    full = time.perf_counter() - t0  # the repair alone: the copy is not what gets killed
    rng = np.random.default_rng(seed)
    interrupted = 0
    for run in range(runs):
        path = work / f"run{run}" / "s.zarr"
        shutil.copytree(template, path)
        proc = FORK.Process(target=_repair_child, args=(str(path),))
        proc.start()
        # Kills spread over the repair's duration (a loaded box only stretches the repair,
        # so more of them land inside; a kill after the end would test nothing).
        time.sleep(float(rng.uniform(0.0, 0.9 * full)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        interrupted += proc.exitcode == -signal.SIGKILL
        assert path.is_dir(), f"run {run}: the store directory is gone after the kill"
        repair(path)  # finishes what the killed one started
        assert [p.kind for p in validate(path, deep=True)] == ["quarantined_field"]
        assert not repair(path).changed
        with EpisodeStore.open(path) as store:
            _assert_episodes(store, kept, skip=("token",))
        # Each of the quarantined episodes' readable frames is in some quarantine folder.
        # (a killed repair may leave `<stamp>.incomplete`; complete folders have no suffix)
        complete = [
            d for d in (path.parent / "s.zarr.quarantine").iterdir() if d.suffix != ".incomplete"
        ]
        for k in (6, 7):
            folders = [
                d / "episodes" / str(k) for d in complete if (d / "episodes" / str(k)).is_dir()
            ]
            assert folders, f"run {run}: episode {k} is in no complete quarantine folder"
            for folder in folders:
                want = make_episode(k)["action"]
                np.testing.assert_array_equal(np.load(folder / "action.npy"), want)
    return interrupted


def test_repair_killed_at_random_points_loses_nothing(filled_store: Path, tmp_path: Path) -> None:
    _damage(filled_store)
    interrupted = _kill_repairs(filled_store, tmp_path / "work", runs=3, seed=7)
    assert interrupted >= 1  # at least one kill landed inside a repair


@pytest.mark.slow
def test_repair_killed_at_random_points_soak(filled_store: Path, tmp_path: Path) -> None:
    _damage(filled_store)
    interrupted = _kill_repairs(filled_store, tmp_path / "work", runs=40, seed=11)
    assert interrupted >= 20
