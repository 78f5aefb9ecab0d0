"""EpisodeWriter: batched steps in, whole per-env episodes out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from store_helpers import small_schema

from unilab.data import EpisodeStore, EpisodeWriter, SchemaMismatchError


def _step_frames(env_ids: np.ndarray, episode_no: np.ndarray, t: np.ndarray) -> dict:
    """Frames whose values encode (env, episode number, step within episode)."""
    code = env_ids * 10_000 + episode_no * 100 + t
    n = len(env_ids)
    return {
        "obs/policy": code[:, None].astype(np.float32) + np.zeros((n, 5), np.float32),
        "obs/critic": code[:, None] + np.zeros((n, 7)),
        "images/cam": np.broadcast_to(
            (code % 256).astype(np.uint8)[:, None, None, None], (n, 8, 6, 3)
        ),
        "action": np.repeat(-code[:, None], 3, axis=1).astype(np.float32),
        "reward": code.astype(np.float32) / 7,
        "timestamp": t * 0.02,
        "policy_version": episode_no,
    }


@pytest.mark.parametrize("commit_frames", [0, 60])
def test_writer_appends_each_env_episode_when_it_ends(store_path: Path, commit_frames: int) -> None:
    n_envs, steps = 5, 120
    rng = np.random.default_rng(0)
    store = EpisodeStore.create(store_path, small_schema())
    writer = EpisodeWriter(
        store, n_envs, origin="sim", initial_capacity=4, commit_frames=commit_frames
    )
    returned: list[int] = []
    horizon = rng.integers(2, 30, size=n_envs)  # forces the ring to grow past 4
    t = np.zeros(n_envs, dtype=np.int64)
    episode_no = np.zeros(n_envs, dtype=np.int64)
    env_ids = np.arange(n_envs)
    expected: list[tuple[int, int, int, bool]] = []  # (env, episode_no, length, terminated)
    for _ in range(steps):
        frames = _step_frames(env_ids, episode_no, t)
        ends = t + 1 == horizon
        term = ends & (env_ids % 2 == 0)
        frames["terminated"], frames["truncated"] = term, ends & ~term
        for e in np.flatnonzero(ends):
            writer.set_meta(int(e), {"seed": int(e), "success": bool(term[e])})
            expected.append((int(e), int(episode_no[e]), int(horizon[e]), bool(term[e])))
        ids = writer.add_step(frames)
        if commit_frames == 0:  # every episode is committed at the step it ends
            assert len(ids) == int(ends.sum())
        else:  # committed in groups of at least commit_frames frames
            assert not ids or sum(store.lengths[ids]) >= commit_frames
        assert ids == list(range(len(returned), len(returned) + len(ids)))
        returned += ids
        t = np.where(ends, 0, t + 1)
        episode_no += ends
        horizon = np.where(ends, rng.integers(2, 30, size=n_envs), horizon)
    pending = writer.pending_frames().copy()
    waiting = len(expected) - len(returned)
    tail_ids = writer.close(keep_partial=True)[waiting:]
    assert len(tail_ids) == int((pending > 0).sum())
    assert writer.frames_written == steps * n_envs
    store.close()

    with EpisodeStore.open(store_path) as reader:
        assert len(reader) == len(expected) + len(tail_ids)
        assert reader.num_frames == steps * n_envs
        for i, (env, number, length, terminated) in enumerate(expected):
            ep = reader.episode(i)
            code = env * 10_000 + number * 100 + np.arange(length)
            np.testing.assert_array_equal(ep["obs/policy"][:, 0], code.astype(np.float32))
            np.testing.assert_array_equal(ep["images/cam"][:, 3, 2, 1], code % 256)
            np.testing.assert_array_equal(ep["action"][:, 2], -code.astype(np.float32))
            np.testing.assert_array_equal(ep["policy_version"], number)
            assert ep["terminated"][-1] == terminated and ep["truncated"][-1] != terminated
            assert not ep["terminated"][:-1].any() and not ep["truncated"][:-1].any()
            assert (ep["origin"] == 0).all() and (ep["token"] == -1).all()
            meta = reader.meta(i)
            assert meta.seed == env and meta.success == terminated
        for i in tail_ids:  # unfinished episodes were closed as truncated
            ep = reader.episode(i)
            assert ep["truncated"][-1] and not ep["terminated"].any()
            assert reader.meta(i).seed is None  # meta is reset after every episode


def test_writer_discard_and_fps_timestamps(store_path: Path) -> None:
    store = EpisodeStore.create(store_path, small_schema())
    writer = EpisodeWriter(store, 2, origin="human", default_meta={"fps": 10.0})
    for step in range(4):
        frames = _step_frames(np.arange(2), np.zeros(2, np.int64), np.full(2, step))
        del frames["timestamp"]
        frames["terminated"] = np.array([False, step == 3])
        frames["truncated"] = np.zeros(2, bool)
        if step == 1:
            writer.discard([1])  # env 1 was reset: its first two frames are dropped
        writer.add_step(frames)
    assert writer.pending_frames().tolist() == [4, 0]
    writer.close()  # env 0's unfinished episode is dropped
    store.close()
    with EpisodeStore.open(store_path) as reader:
        assert len(reader) == 1
        ep = reader.episode(0)
        np.testing.assert_array_equal(ep["obs/policy"][:, 0], 10_000 + np.arange(1, 4))
        np.testing.assert_allclose(ep["timestamp"], np.arange(3) / 10.0)
        assert (ep["origin"] == 2).all()


def test_writer_rejects_bad_steps(store_path: Path) -> None:
    store = EpisodeStore.create(store_path, small_schema())
    writer = EpisodeWriter(store, 3)
    frames = _step_frames(np.arange(3), np.zeros(3, np.int64), np.zeros(3, np.int64))
    frames["terminated"] = frames["truncated"] = np.zeros(3, bool)
    bad = dict(frames, action=np.zeros((2, 3), np.float32))
    with pytest.raises(SchemaMismatchError, match=r"'action'.*\(3, 3\) float32 \(n_envs first\)"):
        writer.add_step(bad)
    with pytest.raises(SchemaMismatchError, match="missing field"):
        writer.add_step({k: v for k, v in frames.items() if k != "reward"})
    with pytest.raises(SchemaMismatchError, match=r"images/cam.*got dtype float64"):
        writer.add_step(dict(frames, **{"images/cam": np.zeros((3, 8, 6, 3))}))
    writer.add_step(frames)
    with pytest.raises(SchemaMismatchError, match="'timestamp' must be given at every step"):
        writer.add_step({k: v for k, v in frames.items() if k != "timestamp"})
    with pytest.raises(SchemaMismatchError, match="origin 'robot'"):
        EpisodeWriter(store, 3, origin="robot")
    store.close()


def test_writer_keeps_only_the_episodes_it_is_told_to(store_path: Path) -> None:
    """`keep` decides per ending episode (collect drops failed demonstrations this way);
    a dropped episode's env starts its next episode cleanly."""
    store = EpisodeStore.create(store_path, small_schema())
    writer = EpisodeWriter(store, 3, default_meta={"fps": 10.0})
    episode = np.zeros(3, np.int64)
    t = np.zeros(3, np.int64)
    for step in range(9):
        frames = _step_frames(np.arange(3), episode, t)
        del frames["timestamp"]
        ends = t == 2  # every episode is 3 frames long
        frames["terminated"], frames["truncated"] = ends, np.zeros(3, bool)
        keep = np.array([True, False, step > 5])  # env 2: only its last episode (steps 6-8)
        writer.add_step(frames, keep=keep)
        episode, t = episode + ends, np.where(ends, 0, t + 1)
    writer.close()
    store.close()
    with EpisodeStore.open(store_path) as reader:
        codes = sorted(int(reader.episode(k)["obs/policy"][0, 0]) for k in range(len(reader)))
    # env 0: episodes 0, 1, 2; env 1: none; env 2: episode 2 only (whole, from its frame 0)
    assert codes == [0, 100, 200, 20_200]
