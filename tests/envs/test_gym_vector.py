"""TaskVectorEnv against gymnasium's API: its env checker (through the one-env adapter), the
vector contract (spaces, dtypes, both autoreset modes, seeding) and gymnasium's own vector
wrappers on top in NEXT_STEP mode."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.wrappers.vector import DictInfoToList, NormalizeObservation, RecordEpisodeStatistics

from unilab.envs import TaskEnv, TaskVectorEnv
from unilab.tasks import make_task
from unilab.tasks.mjcf import MjcfConfig

ANT = {"mjcf_path": "gymnasium:ant.xml", "control_dt": 0.05}


def test_gymnasium_env_checker_passes_on_one_env() -> None:
    env = TaskEnv("mjcf", seed=0, **ANT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any other complaint of the checker fails the test
        # Unbounded Box observations (as gymnasium's own MuJoCo envs have) and no render
        # modes draw warnings, not failures.
        warnings.filterwarnings("ignore", message=".*infinity.*")
        warnings.filterwarnings("ignore", message=".*render.*")
        check_env(env, skip_render_check=True)
    env.close()


def test_vector_spaces_and_dtypes() -> None:
    env = TaskVectorEnv("mjcf", num_envs=5, seed=0, **ANT)
    assert isinstance(env, VectorEnv) and env.num_envs == 5
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP  # gymnasium's default
    assert env.single_observation_space.shape == (27,)
    assert env.single_action_space.shape == (8,)
    assert env.single_action_space.low.min() == -1 and env.single_action_space.high.max() == 1
    assert env.observation_space.shape == (5, 27) and env.action_space.shape == (5, 8)
    obs, infos = env.reset(seed=3)
    assert obs.dtype == np.float32 and obs in env.observation_space and infos == {}
    obs, rew, term, trunc, infos = env.step(env.action_space.sample())
    assert obs.shape == (5, 27) and obs.dtype == np.float32 and obs in env.observation_space
    assert rew.shape == (5,) and rew.dtype == np.float64
    assert term.shape == trunc.shape == (5,) and term.dtype == trunc.dtype == np.bool_
    terms = {"forward_velocity", "healthy", "ctrl_cost"}
    assert set(infos["reward_terms"]) == terms | {f"_{t}" for t in terms}
    assert infos["_reward_terms"].all() and infos["reward_terms"]["_healthy"].all()
    obs2 = env.step(env.action_space.sample())[0]
    assert not np.shares_memory(obs, obs2)
    env.close()


def test_same_step_autoreset_puts_final_obs_in_infos() -> None:
    cfg = MjcfConfig(**ANT, healthy_z_range=[0.2, 1.0], reset_noise_scale=0.0)  # type: ignore[arg-type]
    task = make_task(cfg, num_envs=3, seed=0)
    env = TaskVectorEnv(task, autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=0)
    qpos = task.sim.qpos[1].copy()
    qpos[2] = 2.5  # env 1 leaves the healthy range in this step
    task.sim.reset([1], qpos=qpos)
    obs, _, term, trunc, infos = env.step(np.zeros((3, 8), np.float32))
    assert term.tolist() == [False, True, False] and not trunc.any()
    assert infos["_final_obs"].tolist() == [False, True, False]
    assert infos["final_obs"][0] is None and infos["final_obs"][2] is None
    final = infos["final_obs"][1]
    assert final.shape == (27,) and final[0] > 2.0  # torso z of the ended episode
    assert obs[1, 0] == pytest.approx(task.model.qpos0[2])  # first obs of the new episode
    fi = infos["final_info"]
    assert fi["_episode_return"].tolist() == [False, True, False]
    assert fi["episode_length"][1] == 1 and fi["ended_by_unhealthy"][1]
    # The next step runs on from the reset state; nothing ended, so no final obs.
    _, _, term, _, infos = env.step(np.zeros((3, 8), np.float32))
    assert not term.any() and "final_obs" not in infos


def test_time_out_is_a_truncation_with_final_obs() -> None:
    env = TaskVectorEnv(
        "mjcf", num_envs=2, seed=0, episode_length_s=0.1, autoreset_mode="same_step", **ANT
    )
    env.reset(seed=0)
    env.step(np.zeros((2, 8), np.float32))
    _, _, term, trunc, infos = env.step(np.zeros((2, 8), np.float32))
    assert trunc.all() and not term.any()
    assert infos["_final_obs"].all() and infos["final_info"]["ended_by_time_out"].all()


def test_next_step_autoreset_shows_the_last_obs_then_restarts() -> None:
    cfg = MjcfConfig(**ANT, healthy_z_range=[0.2, 1.0], reset_noise_scale=0.0)  # type: ignore[arg-type]
    task = make_task(cfg, num_envs=3, seed=0)
    env = TaskVectorEnv(task)  # NEXT_STEP
    env.reset(seed=0)
    qpos = task.sim.qpos[1].copy()
    qpos[2] = 2.5  # env 1 leaves the healthy range in this step
    task.sim.reset([1], qpos=qpos)
    obs, rew, term, trunc, infos = env.step(np.zeros((3, 8), np.float32))
    assert term.tolist() == [False, True, False] and not trunc.any()
    assert obs[1, 0] > 2.0  # the ended episode's last observation, in obs itself
    assert "final_obs" not in infos
    assert infos["_episode_return"].tolist() == [False, True, False]
    assert infos["episode_length"][1] == 1 and infos["ended_by_unhealthy"][1]
    assert rew[1] == pytest.approx(infos["episode_return"][1])
    # The next step starts env 1's new episode: its action is ignored, nothing is earned.
    actions = np.ones((3, 8), np.float32)
    obs, rew, term, trunc, infos = env.step(actions)
    assert not term.any() and not trunc.any() and rew[1] == 0.0 and rew[0] != 0.0
    np.testing.assert_allclose(obs[1, :13], task.observe()["policy"][1, :13])
    assert obs[1, 0] == pytest.approx(task.model.qpos0[2])  # its first observation
    assert task.episode_step.tolist() == [2, 0, 2]
    assert infos["_reward_terms"].tolist() == [True, False, True]
    assert infos["reward_terms"]["healthy"][1] == 0.0
    _, rew, *_ = env.step(actions)
    assert rew[1] != 0.0 and task.episode_step.tolist() == [3, 1, 3]


def test_gymnasium_vector_wrappers_run_on_next_step_mode() -> None:
    base = TaskVectorEnv("cartpole_balance", num_envs=8, seed=0, episode_length_s=0.3)
    env = DictInfoToList(RecordEpisodeStatistics(NormalizeObservation(base)))
    obs, infos = env.reset(seed=1)
    assert obs.shape == (8, 5) and infos == [{}] * 8
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(60):
        actions = rng.uniform(-1, 1, (8, 1)).astype(np.float32)
        obs, _, term, trunc, infos = env.step(actions)
        assert np.isfinite(obs).all() and len(infos) == 8
        for i in np.flatnonzero(term | trunc):
            # gymnasium's own episode statistics agree with the task's, episode by episode.
            stats, mine = infos[i]["episode"], infos[i]
            assert stats["l"] == mine["episode_length"]
            assert stats["r"] == pytest.approx(mine["episode_return"], rel=1e-5)
            ended += 1
    assert ended >= 8 * 3  # 15-step episodes: several per env
    normalizer = env.env.env  # type: ignore[attr-defined]
    assert normalizer.obs_rms.count > 8 * 60 * 0.9
    # Normalized observations: roughly zero mean, unit spread (running statistics).
    assert np.abs(obs.mean()) < 1.5 and 0.1 < obs.std() < 3.0


def test_same_step_mode_is_refused_by_gymnasium_observation_wrappers() -> None:
    env = TaskVectorEnv("cartpole_balance", num_envs=2, autoreset_mode=AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match="Expected autoreset_mode to be NEXT_STEP"):
        NormalizeObservation(env)
    with pytest.raises(ValueError, match=r"autoreset_mode=.* is not supported"):
        TaskVectorEnv("cartpole_balance", num_envs=2, autoreset_mode=AutoresetMode.DISABLED)
    assert (
        TaskVectorEnv("cartpole_balance", autoreset_mode="SameStep").metadata["autoreset_mode"]
        == AutoresetMode.SAME_STEP
    )


def rollout(env: TaskVectorEnv, seed: int, steps: int = 10) -> list[np.ndarray]:
    obs, _ = env.reset(seed=seed)
    actions = np.random.default_rng(99).uniform(-1, 1, (steps, env.num_envs, 8))
    out = [obs]
    for a in actions:
        obs, rew, *_ = env.step(a.astype(np.float32))
        out += [obs, rew]
    return out


def test_seeding_is_deterministic() -> None:
    a = TaskVectorEnv("mjcf", num_envs=3, seed=0, **ANT)
    b = TaskVectorEnv("mjcf", num_envs=3, seed=1, **ANT)  # another construction seed
    first = rollout(a, seed=7)
    for x, y in zip(first, rollout(a, seed=7), strict=True):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(first, rollout(b, seed=7), strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(first[0], rollout(a, seed=8)[0])
    # Envs of one batch start from different noisy states.
    assert not np.array_equal(first[0][0], first[0][1])


def test_dict_observation_mode() -> None:
    env = TaskVectorEnv("cartpole_balance", num_envs=2, seed=0, obs_mode="dict")
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"policy"} and obs["policy"].shape == (2, 5)
    assert obs in env.observation_space


def test_bad_arguments_are_explained() -> None:
    with pytest.raises(ValueError, match="obs_mode='image'"):
        TaskVectorEnv("cartpole_balance", num_envs=1, obs_mode="image")
    task = make_task(MjcfConfig(**ANT), num_envs=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot apply to an existing task"):
        TaskVectorEnv(task, control_dt=0.1)
    with pytest.raises(ValueError, match="num_envs=3 but the given task has 2"):
        TaskVectorEnv(task, num_envs=3)
    env = TaskVectorEnv(task)
    with pytest.raises(TypeError, match="one int for the whole batch"):
        env.reset(seed=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="takes no options"):
        env.reset(options={"reset_mask": np.ones(2, bool)})
