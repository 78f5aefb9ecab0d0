"""ChunkRecorder: the training loop's (T, N) batches in, whole per-env episodes out."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.algos.ppo import PPO, PPOConfig
from unilab.config import compose
from unilab.data import EpisodeStore
from unilab.data.background_append import BackgroundAppender
from unilab.data.recorder import ChunkRecorder, schema_from_fields
from unilab.runtime.rollout import collect_chunk, start_rollout
from unilab.tasks.registry import make_task

OBS, CRITIC, ACT = 4, 6, 2
FIELDS = {
    "obs_policy": ((OBS,), "float32"),
    "obs_critic": ((CRITIC,), "float32"),
    "next_obs_critic": ((CRITIC,), "float32"),
    "action": ((ACT,), "float32"),
    "logprob": ((), "float32"),
    "reward": ((), "float32"),
    "terminated": ((), "float32"),
    "truncated": ((), "float32"),
    "episode_return": ((), "float32"),
    "episode_length": ((), "float32"),
}


class Stream:
    """A synthetic transition stream for n envs whose values encode (env, episode, step):
    episode lengths are random (3..40), so episodes cross chunk boundaries."""

    def __init__(self, n_envs: int, seed: int) -> None:
        self.n = n_envs
        self.rng = np.random.default_rng(seed)
        self.episode = np.zeros(n_envs, dtype=np.int64)
        self.t = np.zeros(n_envs, dtype=np.int64)
        self.length = self.rng.integers(3, 41, size=n_envs)
        self.ended: list[tuple[int, int, int, bool, int]] = []  # env, ep, len, term, last step
        self.step_no = 0

    @staticmethod
    def code(env: np.ndarray, episode: np.ndarray, t: np.ndarray) -> np.ndarray:
        return env * 100_000 + episode * 100 + t

    def chunk(self, horizon: int) -> dict[str, np.ndarray]:
        out = {k: np.zeros((horizon, self.n, *s), dtype=d) for k, (s, d) in FIELDS.items()}
        envs = np.arange(self.n)
        for i in range(horizon):
            code = self.code(envs, self.episode, self.t).astype(np.float32)
            out["obs_policy"][i] = code[:, None] + np.arange(OBS)[None, :] / 8
            out["obs_critic"][i] = -code[:, None] - np.arange(CRITIC)[None, :] / 8
            out["action"][i] = code[:, None] * 2 + np.arange(ACT)[None, :] / 4
            out["reward"][i] = code / 1000
            ends = self.t + 1 == self.length
            term = ends & (self.episode % 2 == 0)
            out["terminated"][i] = term
            out["truncated"][i] = ends & ~term
            for e in np.flatnonzero(ends):
                self.ended.append(
                    (int(e), int(self.episode[e]), int(self.length[e]), bool(term[e]), self.step_no)
                )
            self.t = np.where(ends, 0, self.t + 1)
            self.episode = np.where(ends, self.episode + 1, self.episode)
            self.length = np.where(ends, self.rng.integers(3, 41, size=self.n), self.length)
            self.step_no += 1
        return out


def decode(store: EpisodeStore) -> dict[tuple[int, int], dict[str, np.ndarray]]:
    """(env, episode number) -> that episode's frames, for every stored episode."""
    out = {}
    for i in range(len(store)):
        frames = store.episode(i)
        code = frames["obs/policy"][0, 0].astype(np.int64)
        out[(int(code // 100_000), int(code % 100_000 // 100))] = frames
    return out


def check_episode(frames: dict[str, np.ndarray], env: int, ep: int, n: int, term: bool) -> None:
    t = np.arange(n)
    code = Stream.code(np.full(n, env), np.full(n, ep), t).astype(np.float32)
    np.testing.assert_array_equal(frames["obs/policy"], code[:, None] + np.arange(OBS) / 8)
    np.testing.assert_array_equal(frames["obs/critic"], -code[:, None] - np.arange(CRITIC) / 8)
    np.testing.assert_array_equal(frames["action"], code[:, None] * 2 + np.arange(ACT) / 4)
    np.testing.assert_array_equal(frames["reward"], code / 1000)
    last = t == n - 1
    np.testing.assert_array_equal(frames["terminated"], last & term)
    np.testing.assert_array_equal(frames["truncated"], last & ~term)
    np.testing.assert_allclose(frames["timestamp"], t / 50.0)
    assert (frames["origin"] == 0).all()  # sim


def test_schema_keeps_frames_not_learner_bookkeeping() -> None:
    schema, source = schema_from_fields(FIELDS)
    assert set(schema.user_fields) == {"obs/policy", "obs/critic", "action"}
    assert source["obs/policy"] == "obs_policy"
    with pytest.raises(ValueError, match="lack"):
        schema_from_fields({"obs_policy": ((3,), "float32")})


@pytest.mark.parametrize("background", [True, False])
def test_episodes_crossing_chunks_are_whole_and_partials_dropped(
    tmp_path: Path, background: bool
) -> None:
    n_envs, horizon, batches = 6, 7, 30
    stream = Stream(n_envs, seed=0)
    path = tmp_path / "rec.zarr"
    rec = ChunkRecorder(
        path,
        FIELDS,
        num_envs=n_envs,
        fps=50.0,
        meta={"task": "synthetic"},
        commit_frames=100,
        background=background,
        max_share=None,  # the exact set of episodes is checked, not the budget
    )
    for b in range(batches):
        rec.record(stream.chunk(horizon), policy_version=b)
    rec.close()
    # Each env's first episode was running before recording began (its start is unknown to
    # the recorder), and episodes still running at the end are unfinished: neither is kept.
    expected = [e for e in stream.ended if e[1] >= 1]
    assert expected, "the stream must end episodes"
    with EpisodeStore.open(path) as store:
        got = decode(store)
        assert sorted(got) == sorted((env, ep) for env, ep, *_ in expected)
        assert store.num_frames == sum(n for _, _, n, _, _ in expected)
        for env, ep, n, term, last_step in expected:
            frames = got[(env, ep)]
            check_episode(frames, env, ep, n, term)
            # the chunk of step s carries policy version s // horizon
            steps = np.arange(last_step - n + 1, last_step + 1)
            np.testing.assert_array_equal(frames["policy_version"], steps // horizon)
        assert {m.task for m in store.all_meta()} == {"synthetic"}
        assert {m.fps for m in store.all_meta()} == {50.0}
    assert any(n > horizon for _, _, n, _, _ in expected)  # some crossed a chunk boundary


def test_time_budget_thins_recording_to_whole_episodes(tmp_path: Path) -> None:
    """Fed back to back, the recorder takes ~100 % of the wall time: over any budget after
    the first batch, it arms no env again. An env keeps recording only the episode it was
    armed for when the budget ran out, so nothing starts later than one episode after the
    first batch, and what is kept is whole."""
    n_envs, horizon = 4, 6
    stream = Stream(n_envs, seed=5)
    path = tmp_path / "rec.zarr"
    with ChunkRecorder(path, FIELDS, num_envs=n_envs, fps=50.0, max_share=1e-9) as rec:
        for b in range(40):
            rec.record(stream.chunk(horizon), policy_version=b)
        assert rec.batches_over_budget == 39
        skipped = rec.batches_seen - rec.batches_recorded
    with EpisodeStore.open(path) as store:
        got = decode(store)
    ended_first_batch = [
        sum(1 for e, _, _, _, last in stream.ended if e == env and last < horizon)
        for env in range(n_envs)
    ]
    finished = {(env, ep): (n, term) for env, ep, n, term, _ in stream.ended}
    assert got
    for (env, ep), frames in got.items():
        assert ep <= ended_first_batch[env] + 1, (env, ep)
        check_episode(frames, env, ep, *finished[(env, ep)])
    unlimited = sum(1 for _, ep, *_ in stream.ended if ep >= 1)
    assert len(got) <= sum(ended_first_batch) + n_envs < unlimited
    assert skipped > 0  # once those episodes ended, batches cost nothing


def test_background_append_error_reaches_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "rec.zarr"
    ChunkRecorder(path, FIELDS, num_envs=2, fps=50.0).close()  # creates the store
    with EpisodeStore.open(path, "r") as read_only:
        appender = BackgroundAppender(read_only)
        stream = Stream(2, seed=4)
        frames = {
            "obs/policy": stream.chunk(3)["obs_policy"][:, 0],
            "obs/critic": np.zeros((3, CRITIC), np.float32),
            "action": np.zeros((3, ACT), np.float32),
            "reward": np.zeros(3, np.float32),
            "terminated": np.array([False, False, True]),
            "truncated": np.zeros(3, bool),
            "origin": "sim",
        }
        assert appender.append_episodes([(frames, {"fps": 50.0})]) == [0]
        with pytest.raises(RuntimeError, match="opened with mode 'r'"):
            appender.close()
        assert len(read_only) == 0


def test_tracked_columns_per_block_and_versions_per_block(tmp_path: Path) -> None:
    n_envs, block, horizon = 8, 4, 5
    stream = Stream(n_envs, seed=1)
    path = tmp_path / "rec.zarr"
    with ChunkRecorder(
        path, FIELDS, num_envs=n_envs, envs_per_block=block, max_envs=4, fps=50.0, max_share=None
    ) as rec:
        np.testing.assert_array_equal(rec.columns, [0, 1, 4, 5])
        for b in range(40):
            rec.record(stream.chunk(horizon), policy_version=[b, 1000 + b])
    with EpisodeStore.open(path) as store:
        got = decode(store)
        assert {env for env, _ in got} == {0, 1, 4, 5}
        for (env, _), frames in got.items():
            assert (frames["policy_version"] >= 1000).all() == (env >= block)


def test_discontinuity_drops_episodes_in_progress(tmp_path: Path) -> None:
    n_envs, horizon = 3, 6
    stream = Stream(n_envs, seed=2)
    path = tmp_path / "rec.zarr"
    break_at = 10
    with ChunkRecorder(path, FIELDS, num_envs=n_envs, fps=50.0, max_share=None) as rec:
        for b in range(25):
            rec.record(stream.chunk(horizon), policy_version=b, continuous=b != break_at)
    cut = break_at * horizon  # first step of the batch after the break
    with EpisodeStore.open(path) as store:
        got = decode(store)
    for env, ep, n, term, last in stream.ended:
        start = last - n + 1
        whole_before = ep >= 1 and last < cut
        whole_after = start > cut  # started after the break was seen
        assert ((env, ep) in got) == (whole_before or whole_after), (env, ep, start, last)
        if (env, ep) in got:
            check_episode(got[(env, ep)], env, ep, n, term)


@pytest.mark.parametrize("every", [3, 10])
def test_every_n_batches_thins_recording_to_whole_episodes(tmp_path: Path, every: int) -> None:
    n_envs, horizon, batches = 5, 6, 80
    stream = Stream(n_envs, seed=3)
    path = tmp_path / "rec.zarr"
    with ChunkRecorder(
        path, FIELDS, num_envs=n_envs, fps=50.0, every_n_batches=every, max_share=None
    ) as rec:
        for b in range(batches):
            rec.record(stream.chunk(horizon), policy_version=b)
        skipped = rec.batches_seen - rec.batches_recorded
    with EpisodeStore.open(path) as store:
        got = decode(store)
    finished = {(env, ep): (n, term, last) for env, ep, n, term, last in stream.ended}
    for (env, ep), frames in got.items():
        n, term, _ = finished[(env, ep)]
        check_episode(frames, env, ep, n, term)
    # Each arming (batches 0, every, 2 every, ...) of an env that is not recording buys at
    # most one episode: the next one that starts after a done fed at or after the arming.
    for env in range(n_envs):
        kept = sorted(finished[k][2] - finished[k][0] + 1 for k in got if k[0] == env)
        prev_end_batch = -1
        for start in kept:
            done_batch = (start - 1) // horizon
            armings = [b for b in range(0, batches, every) if prev_end_batch < b <= done_batch]
            assert armings, (env, start, prev_end_batch)
            prev_end_batch = (start + finished_len(finished, env, start) - 1) // horizon
    all_whole = sum(1 for _, ep, *_ in stream.ended if ep >= 1)
    assert 0 < len(got) < all_whole
    if every == 10:  # armings far apart: some batches have nothing armed or recording
        assert skipped > 0


def finished_len(finished: dict, env: int, start: int) -> int:
    for (e, _), (n, _, last) in finished.items():
        if e == env and last - n + 1 == start:
            return int(n)
    raise AssertionError((env, start))


def test_records_real_cartpole_rollouts(tmp_path: Path) -> None:
    """Real task, real actor, the PPO transition fields: stored episode lengths match the
    task's own episode_length at each episode end, and obs/actions match the chunks."""
    torch.manual_seed(0)
    cfg = compose(["task=cartpole_balance", "algo=ppo", "task.episode_length_s=0.5"])
    n_envs, horizon = 8, 16
    task = make_task(cfg.task, num_envs=n_envs, seed=0)
    assert isinstance(cfg.algo, PPOConfig)
    learner = PPO(cfg.algo, task.obs_dims, task.action_dim, torch.device("cpu"))
    fields = PPO.chunk_fields(task.obs_dims, task.action_dim)
    path = tmp_path / "rec.zarr"
    state = start_rollout(task)
    chunks = []
    with ChunkRecorder(
        path,
        fields,
        num_envs=n_envs,
        fps=1.0 / task.control_dt,
        meta={"task": cfg.task.name},
        max_share=None,
    ) as rec:
        for b in range(12):
            buf = {k: np.zeros((horizon, n_envs, *s), dtype=d) for k, (s, d) in fields.items()}
            collect_chunk(task, learner.actor, buf, state)
            rec.record(buf, policy_version=b)
            chunks.append(buf)
    stream = {k: np.concatenate([c[k] for c in chunks]) for k in fields}
    done = (stream["terminated"] > 0) | (stream["truncated"] > 0)
    with EpisodeStore.open(path) as store:
        assert len(store) > 0
        lookup = {}  # (env, last step) of every finished episode after each env's first
        for env in range(n_envs):
            ends = np.flatnonzero(done[:, env])
            for a, b in itertools.pairwise(ends):
                lookup[(env, int(b))] = (int(a) + 1, int(b))
        assert len(store) == len(lookup)
        for i in range(len(store)):
            frames = store.episode(i)
            n = len(frames["reward"])
            matches = [
                (env, a)
                for (env, b), (a, _) in lookup.items()
                if b - a + 1 == n
                and np.array_equal(frames["obs/policy"], stream["obs_policy"][a : b + 1, env])
            ]
            assert len(matches) == 1, i
            env, a = matches[0]
            assert stream["episode_length"][a + n - 1, env] == n
            np.testing.assert_array_equal(frames["action"], stream["action"][a : a + n, env])
            np.testing.assert_array_equal(frames["policy_version"], np.arange(a, a + n) // horizon)
