"""validate / repair on damaged stores, and the `unilab data` command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from store_helpers import episode_length, make_episode, make_meta

from unilab.cli import main as unilab_main
from unilab.data import EpisodeStore, StoreLockedError, info, repair, validate
from unilab.data.errors import MissingDataError


def main(argv: list[str]) -> int:
    """`unilab data <argv>`."""
    return unilab_main(["data", *argv])


def _prefix_frames(episodes: int) -> int:
    return sum(episode_length(k) for k in range(episodes))


def _episodes_touching(first: int, last: int) -> list[int]:
    """Episodes (of the filled store) with a frame in [first, last]."""
    out, start = [], 0
    for k in range(10):
        end = start + episode_length(k)
        if start <= last and end > first:
            out.append(k)
        start = end
    return out


def _assert_kept(store: EpisodeStore, kept: list[int]) -> None:
    """The store holds exactly episodes `kept` (original numbering), frame for frame."""
    assert len(store) == len(kept)
    for new, k in enumerate(kept):
        got = store.episode(new)
        for name, want in make_episode(k).items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} of episode {k}")
        assert store.meta(new) == make_meta(k)


def test_missing_chunk_raises_and_repair_keeps_untouched_episodes(filled_store: Path) -> None:
    """A chunk gone from the middle: reads raise naming field and episodes, and repair
    keeps every episode the chunk does not touch. (main read NaN there and truncated the
    store to the prefix before the chunk, losing every later episode.)"""
    # obs/policy has 16 frames per chunk; chunk 3 holds frames 48..63.
    (filled_store / "obs/policy/c/3/0").unlink()
    problems = validate(filled_store)
    assert [(p.kind, p.where) for p in problems] == [("missing_chunk", "obs/policy")]
    assert not problems[0].harmless
    touched = _episodes_touching(48, 63)
    with EpisodeStore.open(filled_store) as store:
        with pytest.raises(MissingDataError, match=r"'obs/policy' chunk 3 .*episodes 6\.\.7"):
            store.read("obs/policy")
        with pytest.raises(MissingDataError, match="obs/policy"):
            store.read_rows("obs/policy", np.array([1, 50]))
        np.testing.assert_array_equal(
            store.read("obs/policy", 0, 48)[:3], make_episode(0)["obs/policy"]
        )
        assert store.read("action").shape[0] == store.num_frames  # other fields read
    report = repair(filled_store)
    assert touched == [6, 7] and report.quarantined_episodes == touched
    assert report.rebuilt and report.backup_dir is not None and report.quarantine_dir
    assert validate(filled_store, deep=True) == []
    assert not repair(filled_store).changed
    kept = [k for k in range(10) if k not in touched]
    with EpisodeStore.open(filled_store) as store:
        _assert_kept(store, kept)
    # The quarantined episodes' readable frames are saved; the lost rows are marked.
    qdir = Path(report.quarantine_dir)
    for k in touched:
        folder = qdir / "episodes" / str(k)
        np.testing.assert_array_equal(np.load(folder / "action.npy"), make_episode(k)["action"])
        bad = np.load(folder / "obs/policy.unreadable_rows.npy")
        assert bad.size > 0
        assert json.loads((folder / "meta.json").read_text())["meta"]["seed"] == k
    # The old store is the backup, byte for byte what was there.
    with EpisodeStore.open(Path(report.backup_dir) / "store") as old:
        assert len(old) == 10
    with EpisodeStore.open(filled_store, "a") as store:  # appending resumes cleanly
        store.append_episode(make_episode(10), make_meta(10))
    with EpisodeStore.open(filled_store) as store:
        _assert_kept(store, [*kept, 10])


def test_corrupt_chunk_found_by_deep_check(filled_store: Path) -> None:
    chunk = filled_store / "reward/c/0"
    chunk.write_bytes(b"\x00garbage" * 4)
    assert validate(filled_store) == []  # shallow: the file exists
    problems = validate(filled_store, deep=True)
    assert [p.kind for p in problems] == ["unreadable_chunk"]
    report = repair(filled_store, deep=True)
    touched = _episodes_touching(0, 31)  # reward: 32 frames per chunk
    assert report.quarantined_episodes == touched
    assert validate(filled_store, deep=True) == []
    with EpisodeStore.open(filled_store) as store:
        _assert_kept(store, [k for k in range(10) if k not in touched])


def test_missing_array_is_quarantined_and_the_other_fields_keep_everything(
    filled_store: Path,
) -> None:
    """A field gone entirely (metadata and chunks): main recreated it empty and dropped all
    10 episodes; now the field is quarantined and every other field keeps its episodes."""
    shutil.rmtree(filled_store / "token")
    assert [p.kind for p in validate(filled_store)] == ["missing_array"]
    report = repair(filled_store)
    assert report.quarantined_fields == ["token"] and report.after.episodes == 10
    assert report.quarantined_episodes == [] and not report.rebuilt
    assert [p.kind for p in validate(filled_store, deep=True)] == ["quarantined_field"]
    assert not repair(filled_store).changed
    with EpisodeStore.open(filled_store) as store:
        assert len(store) == 10
        with pytest.raises(MissingDataError, match=r"'token' .*quarantined"):
            store.read("token")
        for k in range(10):
            got = store.episode(k, [n for n in store.schema.names if n != "token"])
            for name, value in got.items():
                np.testing.assert_array_equal(value, make_episode(k)[name], err_msg=name)
    with EpisodeStore.open(filled_store, "a") as store:  # new episodes carry the field again
        store.append_episode(make_episode(10), make_meta(10))
    with EpisodeStore.open(filled_store) as store:
        np.testing.assert_array_equal(
            store.episode(10, ["token"])["token"], make_episode(10)["token"]
        )


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
    touched = _episodes_touching(0, 31)
    assert f"quarantine {len(touched)} episode(s)" in capsys.readouterr().out
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
