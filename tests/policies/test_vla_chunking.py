"""ChunkExecutor: n_act actions per chunk then re-plan, per-env re-planning after resets,
reproducible noise from the seed, and temporal ensembling as ACT defines it."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.policies.vla.chunking import ChunkExecutor

H, A = 5, 2


class RecordingPlanner:
    """Chunk row j of env e planned at call c: [100 * c + 10 * j + e_obs, noise sum]."""

    def __init__(self) -> None:
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, obs, noise):
        c = len(self.calls)
        self.calls.append((obs["policy"][:, 0].copy(), noise.copy()))
        n = noise.shape[0]
        out = np.zeros((n, H, A), np.float32)
        out[:, :, 0] = 100 * c + 10 * np.arange(H)[None, :] + obs["policy"][:, :1]
        out[:, :, 1] = noise.sum(axis=(1, 2))[:, None]
        return out


def obs_of(n: int) -> dict[str, np.ndarray]:
    return {"policy": np.arange(n, dtype=np.float32)[:, None].repeat(3, 1)}


def test_executes_n_act_actions_then_replans_and_resets_per_env() -> None:
    planner = RecordingPlanner()
    ex = ChunkExecutor(planner, num_envs=3, horizon=H, action_dim=A, n_act=3, seed=0)
    got = [ex(obs_of(3))[:, 0] for _ in range(4)]
    # Call 0 plans all envs; steps 0-2 execute rows 0-2; step 3 re-plans (call 1), row 0.
    np.testing.assert_array_equal(got[0], [0, 1, 2])
    np.testing.assert_array_equal(got[2], [20, 21, 22])
    np.testing.assert_array_equal(got[3], [100, 101, 102])
    assert len(planner.calls) == 2 and ex.replanned.all()
    ex.reset([1])
    step = ex(obs_of(3))[:, 0]
    # Only env 1 re-plans (call 2), as a sub-batch of one with its own observation.
    np.testing.assert_array_equal(planner.calls[2][0], [1.0])
    np.testing.assert_array_equal(step, [110, 201, 112])
    np.testing.assert_array_equal(ex.replanned, [False, True, False])


def test_same_seed_same_noise_and_actions() -> None:
    runs = []
    for seed in (7, 7, 8):
        planner = RecordingPlanner()
        ex = ChunkExecutor(planner, num_envs=2, horizon=H, action_dim=A, n_act=2, seed=seed)
        runs.append(np.stack([ex(obs_of(2)) for _ in range(6)]))
        assert planner.calls[0][1].shape == (2, H, A) and planner.calls[0][1].dtype == np.float32
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0][:, :, 1], runs[2][:, :, 1])


def test_temporal_ensembling_weights_older_predictions_as_act() -> None:
    m = 0.3
    planner = RecordingPlanner()
    ex = ChunkExecutor(planner, 1, H, A, n_act=1, ensemble_decay=m, seed=0)
    out = [float(ex(obs_of(1))[0, 0]) for _ in range(7)]
    # Step s sees the predictions of chunks c = max(0, s-H+1) .. s, made at index j = s - c
    # with value 100 c + 10 j; ACT weighs them exp(-m i), i = 0 for the oldest.
    for s, value in enumerate(out):
        chunks = list(range(max(0, s - H + 1), s + 1))
        preds = np.array([100 * c + 10 * (s - c) for c in chunks], float)
        w = np.exp(-m * np.arange(len(chunks)))
        assert value == pytest.approx(float((w * preds).sum() / w.sum()), rel=1e-5)
    # m = 0 is a plain average; a reset forgets the window.
    ex0 = ChunkExecutor(RecordingPlanner(), 1, H, A, n_act=1, ensemble_decay=0.0)
    vals = [float(ex0(obs_of(1))[0, 0]) for _ in range(3)]
    assert vals[2] == pytest.approx(np.mean([20, 110, 200]))
    ex0.reset()
    assert float(ex0(obs_of(1))[0, 0]) == pytest.approx(300.0)


def test_bad_arguments_and_planner_output_are_reported() -> None:
    with pytest.raises(ValueError, match="n_act must be in \\[1, horizon=5\\]"):
        ChunkExecutor(RecordingPlanner(), 1, H, A, n_act=6)
    ex = ChunkExecutor(lambda obs, noise: np.zeros((1, H - 1, A)), 1, H, A, n_act=2)
    with pytest.raises(
        ValueError, match="planner returned shape \\(1, 4, 2\\); expected \\(1, 5, 2\\)"
    ):
        ex(obs_of(1))


class TokenRecordingPlanner(RecordingPlanner):
    """Also records the `token` input of every plan."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: list[np.ndarray] = []

    def __call__(self, obs, noise):
        self.tokens.append(np.asarray(obs["token"]).copy())
        return super().__call__(obs, noise)


def test_held_choice_is_made_once_per_episode_and_fed_to_every_chunk() -> None:
    planner = TokenRecordingPlanner()
    choices: list[np.ndarray] = []

    def choose(obs):  # a state-dependent choice that changes whenever the state does
        pick = (obs["policy"][:, 0] + 10 * len(choices)).astype(np.int64) % 7
        choices.append(obs["policy"][:, 0].copy())
        return pick

    ex = ChunkExecutor(planner, 3, H, A, n_act=2, seed=0, hold=("token", choose))
    o = obs_of(3)
    for _ in range(5):  # three chunks per env (calls 0, 2, 4), one choice
        ex(o)
    assert len(choices) == 1
    first = planner.tokens[0]
    np.testing.assert_array_equal(first, [0, 1, 2])
    assert all(np.array_equal(t, first) for t in planner.tokens)
    # Env 1 starts a new episode: only it chooses again, the others keep their token.
    ex.reset([1])
    ex(o)
    assert len(choices) == 2 and np.array_equal(choices[1], [1.0])
    np.testing.assert_array_equal(ex.held, [0, 11 % 7, 2])
    assert np.array_equal(planner.tokens[-1], [11 % 7])
    # An observation that carries the token itself wins over the hold.
    ex.reset()
    ex({**o, "token": np.full(3, 5, np.int64)})
    assert len(choices) == 2 and np.array_equal(planner.tokens[-1], [5, 5, 5])


def test_held_choice_must_give_one_nonnegative_value_per_env() -> None:
    ex = ChunkExecutor(
        RecordingPlanner(), 2, H, A, n_act=1, hold=("token", lambda obs: np.array([0, -1]))
    )
    with pytest.raises(ValueError, match="values >= 0"):
        ex(obs_of(2))
