"""validate / repair on damaged stores, and the `unilab data` command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from store_helpers import Expected, assert_store_matches, episode_length, make_episode, make_meta

from unilab.cli import main as unilab_main
from unilab.data import EpisodeStore, StoreLockedError, info, repair, validate


def main(argv: list[str]) -> int:
    """`unilab data <argv>`."""
    return unilab_main(["data", *argv])


def _prefix_frames(episodes: int) -> int:
    return sum(episode_length(k) for k in range(episodes))


def test_missing_chunk_repair_keeps_longest_prefix(filled_store: Path) -> None:
    # obs/policy has 16 frames per chunk; chunk 3 holds frames 48..63.
    (filled_store / "obs/policy/c/3/0").unlink()
    problems = validate(filled_store)
    assert [(p.kind, p.where) for p in problems] == [("missing_chunk", "obs/policy")]
    assert not problems[0].harmless
    # What a reader would get without the check: NaN-filled (fill value) frames.
    with EpisodeStore.open(filled_store) as store:
        assert np.isnan(store.read("obs/policy")[48:64]).all()
    report = repair(filled_store)
    keep = max(e for e in range(11) if _prefix_frames(e) <= 48)
    assert report.after.episodes == keep and report.dropped_episodes == 10 - keep
    assert validate(filled_store, deep=True) == []
    assert not repair(filled_store).changed
    with EpisodeStore.open(filled_store) as store:
        assert len(store) == keep
        assert_store_matches(store, Expected())
    with EpisodeStore.open(filled_store, "a") as store:  # and appending resumes cleanly
        store.append_episode(make_episode(keep), make_meta(keep))
    with EpisodeStore.open(filled_store) as store:
        assert_store_matches(store, Expected())


def test_corrupt_chunk_found_by_deep_check(filled_store: Path) -> None:
    chunk = filled_store / "reward/c/0"
    chunk.write_bytes(b"\x00garbage" * 4)
    assert validate(filled_store) == []  # shallow: the file exists
    problems = validate(filled_store, deep=True)
    assert [p.kind for p in problems] == ["unreadable_chunk"]
    report = repair(filled_store, deep=True)
    assert report.after.episodes == 0
    assert validate(filled_store, deep=True) == []


def test_missing_array_is_recreated(filled_store: Path) -> None:
    shutil.rmtree(filled_store / "token")
    assert [p.kind for p in validate(filled_store)] == ["missing_array"]
    report = repair(filled_store)
    assert report.recreated == ["token"] and report.after.episodes == 0
    assert validate(filled_store, deep=True) == []


def test_temp_files_and_tail_are_harmless(filled_store: Path) -> None:
    leftover = filled_store / "action/c/zarr.1234abcd.partial"
    leftover.write_bytes(b"half")
    with EpisodeStore.open(filled_store, "r") as store:
        frames = store.num_frames
    # Simulate an append that resized and wrote but never committed.
    import zarr

    arr = zarr.open_array(filled_store, path="reward", mode="r+")
    arr.resize((frames + 5,))
    arr[frames:] = 7.0
    problems = validate(filled_store)
    assert sorted(p.kind for p in problems) == ["temp_file", "uncommitted_tail"]
    assert all(p.harmless for p in problems)
    report = repair(filled_store)
    assert report.removed_files == ["action/c/zarr.1234abcd.partial"]
    assert report.truncated == {"reward": (frames + 5, frames)}
    assert report.dropped_episodes == 0
    assert validate(filled_store) == []


def test_repair_refuses_while_writer_open(filled_store: Path) -> None:
    with EpisodeStore.open(filled_store, "a"), pytest.raises(StoreLockedError):
        repair(filled_store)


def test_info_summary(filled_store: Path) -> None:
    doc = info(filled_store)
    assert doc["episodes"] == 10 and doc["frames"] == _prefix_frames(10)
    assert doc["success"] == {"true": 5, "false": 5}
    assert doc["tasks"] == {"task0": 4, "task1": 3, "task2": 3}
    by_origin = doc["frames_by_origin"]
    assert sum(by_origin.values()) == doc["frames"]
    assert by_origin["sim"] == sum(episode_length(k) for k in range(10) if k % 4 == 0)
    assert doc["fields"]["images/cam"]["shape"] == [8, 6, 3]
    assert doc["disk_bytes"] > 0


def test_cli_info_validate_repair(filled_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(filled_store)]) == 0
    out = capsys.readouterr().out
    assert "episodes 10" in out and "images/cam" in out
    assert main(["info", str(filled_store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 10

    assert main(["validate", str(filled_store)]) == 0
    assert "ok" in capsys.readouterr().out
    (filled_store / "timestamp/c/0").unlink()
    assert main(["validate", str(filled_store), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["problems"][0]["kind"] == "missing_chunk"
    assert main(["repair", str(filled_store)]) == 0
    assert "dropped 10 episode(s)" in capsys.readouterr().out
    assert main(["repair", str(filled_store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is False
    assert main(["validate", str(filled_store), "--deep"]) == 0


def test_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.zarr"
    for command in ("info", "validate", "repair"):
        assert main([command, str(missing)]) == 2
        err = capsys.readouterr().err
        assert str(missing) in err and "expected an episode store" in err
    assert main(["frobnicate", str(missing)]) == 2
    assert main([]) == 2
