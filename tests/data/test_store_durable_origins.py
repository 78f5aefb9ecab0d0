"""Real-robot and human recordings are fsynced by default; a committed chunk that is gone
raises on every read path instead of reading back as fill values."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from store_helpers import episode_frames, make_meta, small_schema

from unilab.data import EpisodeStore
from unilab.data.dataset import FrameDataset
from unilab.data.errors import MissingDataError


def _fsynced_during_append(
    store: EpisodeStore, frames: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> set[str]:
    """Paths (relative to the store) that `os.fsync` was called on during one append."""
    seen: set[str] = set()
    real = os.fsync

    def spy(fd: int) -> None:
        seen.add(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    store.append_episode(frames, make_meta(0))
    monkeypatch.setattr(os, "fsync", real)
    root = str(store.path.resolve())
    return {os.path.relpath(p, root) for p in seen if p.startswith(root)}


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_real_and_human_frames_are_fsynced_by_default(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On main `fsync_data` defaulted to False for every origin, so a power cut could lose
    a committed HIL session's frames (only the commit marker was fsynced)."""
    store = EpisodeStore.create(store_path, small_schema())
    try:
        for origin, durable in (("sim", False), ("wm", False), ("human", True), ("real", True)):
            frames = episode_frames(0)
            frames["origin"] = np.full(len(frames["reward"]), origin)
            synced = _fsynced_during_append(store, frames, monkeypatch)
            chunks = {p for p in synced if p.startswith("action/c/")}
            assert bool(chunks) == durable, (origin, sorted(synced))
            assert ("action/zarr.json" in synced) == durable
            assert "zarr.json" in synced or "." in synced  # the commit marker, always
        store.fsync_data = False  # an explicit choice wins over the origin default
        frames = episode_frames(1)
        frames["origin"] = np.full(len(frames["reward"]), "real")
        synced = _fsynced_during_append(store, frames, monkeypatch)
        assert not {p for p in synced if p.startswith("action/")}
    finally:
        store.close()


def test_missing_chunk_raises_on_every_read_path(filled_store: Path) -> None:
    (filled_store / "action/c/2/0").unlink()  # frames 32..47
    with EpisodeStore.open(filled_store) as store:
        with pytest.raises(MissingDataError, match=r"'action' chunk 2 \(frames 32\.\.47"):
            store.episode(5)
        store.episode(0)  # episodes the chunk does not hold still read
        with pytest.raises(MissingDataError, match="'action'"):
            store.read_rows("action", np.array([[0, 40]]))
    with pytest.raises(MissingDataError, match="'action'"):
        FrameDataset(filled_store)
    FrameDataset(filled_store, fields=["obs/policy", "reward"])  # a subset without it loads


def test_missing_chunk_is_reported_to_every_thread_that_reads_it(filled_store: Path) -> None:
    """Threads sharing one store: each read that needs the missing chunk raises, no other
    read does (a miss seen by one thread is never taken away from another)."""
    from concurrent.futures import ThreadPoolExecutor

    (filled_store / "action/c/2/0").unlink()  # frames 32..47: episodes 4..6
    with EpisodeStore.open(filled_store) as store:
        touched = {
            k
            for k in range(len(store))
            if store.starts[k] <= 47 and store.starts[k] + store.lengths[k] > 32
        }

        def read(k: int) -> bool:
            try:
                store.episode(k, ["action"])
            except MissingDataError:
                return False
            return True

        with ThreadPoolExecutor(8) as pool:
            ks = [k % len(store) for k in range(400)]
            results = list(pool.map(read, ks))
    assert touched == {4, 5, 6}
    assert all(ok == (k not in touched) for k, ok in zip(ks, results, strict=True))
