"""Durability: SIGKILLed writers, a reader beside a live writer, flat memory while appending."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_helpers import (
    Expected,
    assert_store_matches,
    make_episode,
    make_meta,
    rss_bytes,
    small_schema,
)

from unilab.data import EpisodeStore, StoreSchema, repair, validate

FORK = mp.get_context("fork")


def _append_forever(path: str, committed: Any, ready: Any) -> None:
    """Append episodes k = len(store), ... forever; every 4th commit holds several."""
    # SIGKILL is a process crash: the page cache survives it, so data fsync (the default for
    # the real/human episodes here, ~0.3 s each) would only keep kills from landing in commits.
    store = EpisodeStore.open(path, "a", fsync_data=False)
    ready.set()
    while True:
        k = len(store)
        batch = 1 + k % 3 if store.commit.seq % 4 == 3 else 1
        store.append_episodes([(make_episode(i), make_meta(i)) for i in range(k, k + batch)])
        committed.value = len(store)


def test_sigkill_during_appends_keeps_committed_episodes(store_path: Path) -> None:
    EpisodeStore.create(store_path, small_schema()).close()
    rng = np.random.default_rng(1234)
    expected = Expected()
    runs, tails, repaired = 50, 0, 0
    for run in range(runs):
        with EpisodeStore.open(store_path, "r") as before:
            start = len(before)
        committed, ready = FORK.Value("q", start), FORK.Event()
        proc = FORK.Process(target=_append_forever, args=(str(store_path), committed, ready))
        proc.start()
        # Most kills land in the append loop; every 5th may land while the writer opens the
        # crashed store (and truncates the previous run's tail).
        if run % 5 != 4:
            assert ready.wait(10), "writer did not start"
        time.sleep(float(rng.uniform(0.0, 0.15)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        assert proc.exitcode == -signal.SIGKILL, f"writer exited on its own: {proc.exitcode}"

        problems = validate(store_path, deep=run % 5 == 0)  # deep: decode every chunk
        assert all(p.harmless for p in problems), problems
        tails += bool(problems)
        with EpisodeStore.open(store_path, "r") as store:
            # Every append that returned is there; at most the in-flight commit beyond it.
            assert committed.value <= len(store) <= committed.value + 3
            assert_store_matches(store, expected)  # no phantom (fill-valued) frames
            episodes = len(store)
        if run % 2 == 0:  # otherwise the next writer deals with the tail itself
            report = repair(store_path)
            assert report.dropped_episodes == 0
            assert validate(store_path) == []
            assert not repair(store_path).changed  # idempotent
            repaired += report.changed
        with EpisodeStore.open(store_path, "r") as store:
            assert len(store) == episodes
    repair(store_path)
    assert validate(store_path, deep=True) == []
    with EpisodeStore.open(store_path, "r") as store:
        assert_store_matches(store, expected)
        assert len(store) >= 5  # the writers made progress (slowly on a loaded machine)
    # The kills must actually have interrupted appends for this test to mean anything.
    assert tails >= 10, f"only {tails} of {runs} kills left an uncommitted tail"
    assert repaired >= 5
    print(f"{runs} kills: {tails} left a tail, {repaired} repaired, {len(store)} episodes")


def _append_slowly(path: str, count: int) -> None:
    with EpisodeStore.open(path, "a") as store:
        for k in range(len(store), count):
            store.append_episode(make_episode(k), make_meta(k))
            time.sleep(0.002)


def test_reader_beside_writer_sees_whole_episodes(store_path: Path) -> None:
    EpisodeStore.create(store_path, small_schema()).close()
    count = 30
    proc = FORK.Process(target=_append_slowly, args=(str(store_path), count))
    proc.start()
    seen, observed_counts = 0, set()
    deadline = time.monotonic() + 30
    with EpisodeStore.open(store_path, "r") as reader:
        while seen < count and time.monotonic() < deadline:
            reader.refresh()
            observed_counts.add(len(reader))
            for k in range(seen, len(reader)):
                ep = reader.episode(k)
                for name, arr in make_episode(k).items():
                    np.testing.assert_array_equal(ep[name], arr, err_msg=f"episode {k} {name}")
                assert reader.meta(k) == make_meta(k)
            seen = len(reader)
        proc.join(10)
        assert proc.exitcode == 0
        assert seen == count
        assert_store_matches(reader, Expected())
    # The reader really ran beside the writer, not after it.
    assert len(observed_counts) >= 5, observed_counts


def _append_frames(path: Path, total: int, per_episode: int) -> list[int]:
    schema = StoreSchema.build(obs={"policy": 128}, action=8)
    rss: list[int] = []
    n = per_episode
    with EpisodeStore.create(path, schema) as store:
        for k in range(total // per_episode):
            frames = {
                "obs/policy": np.full((n, 128), k, np.float32) + np.arange(128, dtype=np.float32),
                "action": np.full((n, 8), -k, np.float32),
                "reward": np.ones(n, np.float32),
                "terminated": np.zeros(n, bool),
                "truncated": np.r_[np.zeros(n - 1, bool), True],
                "origin": "sim",
            }
            store.append_episode(frames, {"fps": 50.0})
            rss.append(rss_bytes())
        assert store.num_frames == total
        np.testing.assert_array_equal(store.episode(-1)["action"][:, 0], -(total // n - 1))
    return rss


def test_append_100k_frames_memory_flat(store_path: Path) -> None:
    rss = _append_frames(store_path, 100_000, 2000)  # ~50 MB of observations
    growth = rss[-1] - rss[4]
    assert growth < 24 * 2**20, f"RSS grew {growth / 2**20:.1f} MiB over 90k frames"


@pytest.mark.slow
def test_append_1m_frames_memory_flat(store_path: Path) -> None:
    rss = _append_frames(store_path, 1_000_000, 2000)  # ~500 MB of observations
    growth = rss[-1] - rss[9]
    assert growth < 32 * 2**20, f"RSS grew {growth / 2**20:.1f} MiB over 980k frames"
