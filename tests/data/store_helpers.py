"""Deterministic episodes for the episode-store tests: episode k's frames are a function of k,
so any process can recompute what must be in the store."""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from unilab.data import EpisodeMeta, EpisodeStore, FieldSpec, StoreSchema
from unilab.data.schema import CORE_FIELDS

# Small chunks so that appends straddle chunk boundaries (read-modify-write of committed
# chunks) as they would at scale.
SMALL_CHUNKS: dict[str, FieldSpec] = {
    "obs/policy": FieldSpec((5,), "float32", chunk_frames=16),
    "obs/critic": FieldSpec((7,), "float64", chunk_frames=8),
    "images/cam": FieldSpec((8, 6, 3), "uint8", chunk_frames=4),
    "action": FieldSpec((3,), "float32", chunk_frames=16),
    **{n: FieldSpec(s.shape, s.dtype, chunk_frames=32) for n, s in CORE_FIELDS.items()},
}


def small_schema() -> StoreSchema:
    return StoreSchema(SMALL_CHUNKS)


def episode_length(k: int) -> int:
    return 3 + (k * 7) % 13


@lru_cache(maxsize=4096)
def _make(k: int) -> dict[str, np.ndarray]:
    n = episode_length(k)
    j = np.arange(n)
    last = j == n - 1
    frames: dict[str, np.ndarray] = {
        "obs/policy": (k * 1000 + j[:, None] + np.arange(5)[None, :] / 10).astype(np.float32),
        "obs/critic": k + j[:, None] * 0.001 + np.arange(7)[None, :] * 1e-7,
        "images/cam": (
            (k * 31 + j[:, None, None, None] * 7 + np.arange(8 * 6 * 3).reshape(8, 6, 3)) % 256
        ).astype(np.uint8),
        "action": (-k - j[:, None] / 100 - np.arange(3)[None, :]).astype(np.float32),
        "reward": (k + j * 0.5).astype(np.float32),
        "terminated": last & (k % 3 != 0),
        "truncated": last & (k % 3 == 0),
        "timestamp": k + j * 0.02,
        "origin": np.full(n, k % 4, dtype=np.uint8),
        "is_intervention": (j % 2 == 1) & (k % 2 == 1),
        "policy_version": np.full(n, k, dtype=np.int64),
        "token": np.full(n, k % 5 - 1, dtype=np.int32),
        "segment": ((j + k) % 5).astype(np.uint8),
    }
    for a in frames.values():
        a.flags.writeable = False
    return frames


def make_episode(k: int) -> dict[str, np.ndarray]:
    return _make(k)


def make_meta(k: int) -> EpisodeMeta:
    return EpisodeMeta(
        task=f"task{k % 3}",
        language_instruction=f"pick the block number {k}",
        success=(k % 2 == 0),
        seed=k,
        robot="so100",
        fps=50.0,
        tags={"k": k, "nested": {"list": [k, k + 1]}},
    )


class Expected:
    """Concatenated expected columns for episodes [0, E), cached for the last E asked."""

    def __init__(self) -> None:
        self._episodes = -1
        self._columns: dict[str, np.ndarray] = {}

    def upto(self, episodes: int) -> dict[str, np.ndarray]:
        if episodes != self._episodes:
            eps = [make_episode(k) for k in range(episodes)]
            self._columns = {n: np.concatenate([e[n] for e in eps]) for n in SMALL_CHUNKS}
            self._episodes = episodes
        return self._columns


def assert_store_matches(store: EpisodeStore, expected: Expected) -> None:
    """Every committed episode holds exactly what `make_episode` produces."""
    e = len(store)
    lengths = np.array([episode_length(k) for k in range(e)], dtype=np.int64)
    np.testing.assert_array_equal(store.lengths, lengths)
    np.testing.assert_array_equal(store.starts, np.concatenate([[0], np.cumsum(lengths)[:-1]])[:e])
    assert store.num_frames == int(lengths.sum())
    want = expected.upto(e)
    for name in SMALL_CHUNKS:
        got = store.read(name)
        if e:
            np.testing.assert_array_equal(got, want[name], err_msg=name)
        else:
            assert got.shape[0] == 0


def snapshot(path: Path) -> dict[str, str]:
    """Relative path -> content hash of every file under `path`."""
    out = {}
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            f = Path(dirpath) / name
            out[str(f.relative_to(path))] = hashlib.sha1(f.read_bytes()).hexdigest()
    return out


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def episode_frames(k: int) -> dict[str, Any]:
    """A writable copy of episode k (for tests that mutate it)."""
    return {n: a.copy() for n, a in make_episode(k).items()}
