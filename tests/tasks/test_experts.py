"""Scripted experts: each solves its task in a handful of seeded episodes (the 200-episode
check is slow-marked here and measured by bench/experts.py), reports a valid mode per env,
and draws new modes only for the envs it is told were reset."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.config import compose
from unilab.tasks.experts import EXPERTS, ScriptedExpert, make_expert
from unilab.tasks.registry import make_task
from unilab.tasks.tabletop import TabletopTask

TASKS = ("arm_pick_place", "arm_move_side", "arm_stack", "arm_around_obstacle")


def run_episodes(
    name: str, num_envs: int, episodes: int, seed: int
) -> tuple[np.ndarray, np.ndarray, ScriptedExpert]:
    """Success and mode of the first `episodes` episodes an expert finishes."""
    task = make_task(
        compose([f"task={name}", "task.cameras=[]"]).task, num_envs=num_envs, seed=seed
    )
    assert isinstance(task, TabletopTask)
    task.reset()
    expert = make_expert(task, seed=seed)
    success, modes = [], []
    while len(success) < episodes:
        mode = expert.mode.copy()
        result = task.step(expert.act())
        done = np.flatnonzero(result.terminated | result.truncated)
        success += result.extras["success"][done].tolist()
        modes += mode[done].tolist()
        expert.reset(done)
    return np.array(success[:episodes]), np.array(modes[:episodes]), expert


def test_every_family_task_has_an_expert() -> None:
    assert sorted(EXPERTS.names()) == sorted(TASKS)


@pytest.mark.parametrize("name", TASKS)
def test_expert_solves_a_few_seeded_episodes(name: str) -> None:
    success, modes, expert = run_episodes(name, num_envs=6, episodes=6, seed=11)
    assert success.all(), (success, modes)
    assert ((modes >= 0) & (modes < expert.num_modes)).all()
    assert len(expert.mode_names) == expert.num_modes >= 2


def test_reset_redraws_modes_only_for_the_given_envs() -> None:
    task = make_task(compose(["task=arm_stack", "task.cameras=[]"]).task, num_envs=32, seed=0)
    task.reset()
    expert = make_expert(task, seed=0)
    assert len(np.unique(expert.mode)) == expert.num_modes  # 32 draws hit all 4 modes
    for _ in range(5):
        task.step(expert.act())
    before_mode, before_phase = expert.mode.copy(), expert.phase.copy()
    expert.reset([3, 7])
    keep = np.setdiff1d(np.arange(32), [3, 7])
    np.testing.assert_array_equal(expert.mode[keep], before_mode[keep])
    np.testing.assert_array_equal(expert.phase[keep], before_phase[keep])
    assert (expert.phase[[3, 7]] == 0).all()
    actions = expert.act()
    assert actions.shape == (32, task.action_dim) and actions.dtype == np.float32
    assert np.abs(actions).max() <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_expert_succeeds_in_95_percent_of_200_episodes(name: str) -> None:
    success, modes, expert = run_episodes(name, num_envs=50, episodes=200, seed=0)
    assert success.mean() >= 0.95, success.mean()
    for mode in range(expert.num_modes):
        assert (modes == mode).sum() >= 20, np.bincount(modes)


def _seeded_run(num_envs: int, slot: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Actions and proprioception of env `slot`'s first episode, seeded `seed` (the other
    envs get other seeds), and its expert mode."""
    cfg = compose(["task=arm_move_side", "task.cameras=[]"]).task
    task = make_task(cfg, num_envs=num_envs, seed=100 + num_envs)  # other shared streams
    assert isinstance(task, TabletopTask)
    task.episode_seeder = lambda ids: np.where(ids == slot, seed, 7_000 + ids)
    obs = task.reset()
    expert = make_expert(task, seed=num_envs)
    expert.reset(None, seeds=task.episode_seed)
    mode = int(expert.mode[slot])
    actions, proprio = [], []
    while True:
        action = expert.act()
        actions.append(action[slot])
        proprio.append(obs["policy"][slot])
        result = task.step(action)
        if result.terminated[slot] or result.truncated[slot]:
            return np.stack(actions), np.stack(proprio), mode
        ended = np.flatnonzero(result.terminated | result.truncated)
        expert.reset(ended, seeds=task.episode_seed[ended])
        obs = result.obs


def test_a_seeded_episode_does_not_depend_on_its_env_slot() -> None:
    alone = _seeded_run(1, 0, seed=42)
    among = _seeded_run(5, 3, seed=42)
    other = _seeded_run(1, 0, seed=43)
    np.testing.assert_array_equal(alone[0], among[0])
    np.testing.assert_array_equal(alone[1], among[1])
    assert alone[2] == among[2]
    assert not np.array_equal(alone[1][0], other[1][0])  # another seed: another start
