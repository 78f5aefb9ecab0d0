"""Scripted experts: each solves its task in a handful of seeded episodes (the 200-episode
check is slow-marked here and measured by bench/experts.py), reports a valid mode per env,
and draws new modes only for the envs it is told were reset."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.config import compose
from unilab.tasks.experts import EXPERTS, ScriptedExpert, make_expert, mode_probs_from_shares
from unilab.tasks.registry import make_task
from unilab.tasks.tabletop import TabletopTask

TASKS = (
    "arm_pick_place",
    "arm_move_side",
    "arm_stack",
    "arm_around_obstacle",
    "arm_move_to_goal",
)


def run_episodes(
    name: str, num_envs: int, episodes: int, seed: int, *overrides: str
) -> tuple[np.ndarray, np.ndarray, ScriptedExpert]:
    """Success and mode of the first `episodes` episodes an expert finishes."""
    task = make_task(
        compose([f"task={name}", "task.cameras=[]", *overrides]).task,
        num_envs=num_envs,
        seed=seed,
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


def test_an_offset_wall_leaves_both_ways_around_it_solvable() -> None:
    """task.wall_offset moves the wall 8 cm left of the cube-goal line: the expert's via
    points follow the wall, so both ways still succeed (the left way is longer)."""
    success, modes, expert = run_episodes("arm_around_obstacle", 12, 24, 3, "task.wall_offset=0.08")
    wall_y = expert.task.wall_pos[:, 1]  # type: ignore[attr-defined]
    assert ((wall_y > 0.08 - 0.031) & (wall_y < 0.08 + 0.031)).all(), wall_y
    for mode in (0, 1):
        assert success[modes == mode].mean() >= 0.6, (mode, success, modes)


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


def test_mode_shares_set_how_often_each_strategy_is_drawn() -> None:
    """Demonstrations where one way dominates: with push:0.8,carry:0.2 the seeded per-episode
    draws come out about 80/20 (uniform without shares), the same for the same seeds."""
    task = make_task(compose(["task=arm_move_side", "task.cameras=[]"]).task, num_envs=8, seed=0)
    task.reset()
    seeds = np.arange(1000, 1400)
    probs = mode_probs_from_shares(EXPERTS.get("arm_move_side").mode_names, {"push": 4, "carry": 1})
    assert probs == pytest.approx([0.8, 0.2])

    def draws(mode_probs: list[float] | None) -> np.ndarray:
        expert = make_expert(task, seed=0, mode_probs=mode_probs)
        out = []
        for start in range(0, len(seeds), 8):
            expert.reset(None, seeds=seeds[start : start + 8])
            out.append(expert.mode.copy())
        return np.concatenate(out)

    skewed, uniform = draws(probs), draws(None)
    assert 0.74 < (skewed == 0).mean() < 0.86, (skewed == 0).mean()
    assert 0.42 < (uniform == 0).mean() < 0.58, (uniform == 0).mean()
    np.testing.assert_array_equal(draws(probs), skewed)  # seeded: the same episodes again
    with pytest.raises(ValueError, match="its modes: push, carry"):
        mode_probs_from_shares(("push", "carry"), {"slide": 1.0})
    with pytest.raises(ValueError, match="not all 0"):
        mode_probs_from_shares(("push", "carry"), {"push": 0.0})
    with pytest.raises(ValueError, match="sum to 1"):
        make_expert(task, mode_probs=[0.5, 0.6])


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


def _perturbed_run(num_envs: int, slot: int, seed: int, noise: float, steps: int = 60):
    """Executed and recorded actions of env `slot` over `steps` steps, its episode seeded
    `seed`, with perturbation bursts of std `noise`."""
    cfg = compose(["task=arm_move_side", "task.cameras=[]"]).task
    task = make_task(cfg, num_envs=num_envs, seed=100 + num_envs)
    assert isinstance(task, TabletopTask)
    task.episode_seeder = lambda ids: np.where(ids == slot, seed, 7_000 + ids)
    task.reset()
    expert = make_expert(task, seed=num_envs, action_noise=noise)
    expert.reset(None, seeds=task.episode_seed)
    executed, recorded, flags = [], [], []
    for _ in range(steps):
        action = expert.act()
        run = expert.perturb(action)
        executed.append(run[slot])
        recorded.append(action[slot])
        flags.append(expert.perturbed[slot])
        task.step(run)
    return np.stack(executed), np.stack(recorded), np.array(flags)


def test_perturbation_bursts_move_the_arm_only_and_replay_from_the_seed() -> None:
    executed, recorded, flags = _perturbed_run(1, 0, seed=5, noise=0.5, steps=120)
    assert 0.05 < flags.mean() < 0.5  # bursts of 4 steps every ~20
    differs = (executed != recorded).any(axis=1)
    np.testing.assert_array_equal(differs & ~flags, np.zeros_like(flags))  # only when flagged
    np.testing.assert_array_equal(executed[:, 4], recorded[:, 4])  # the gripper is kept
    assert np.abs(executed).max() <= 1.0
    # The same episode in another env slot among other episodes: the same noise.
    again = _perturbed_run(4, 2, seed=5, noise=0.5, steps=120)
    np.testing.assert_array_equal(again[0], executed)
    np.testing.assert_array_equal(again[2], flags)
    clean = _perturbed_run(1, 0, seed=5, noise=0.0, steps=10)
    np.testing.assert_array_equal(clean[0], clean[1])
    assert not clean[2].any()
    with pytest.raises(ValueError, match="action_noise"):
        make_expert(make_task(compose(["task=arm_move_side", "task.cameras=[]"]).task, 1), 0, -1.0)


def test_the_expert_still_solves_episodes_under_perturbation() -> None:
    cfg = compose(["task=arm_pick_place", "task.cameras=[]"]).task
    task = make_task(cfg, num_envs=8, seed=3)
    assert isinstance(task, TabletopTask)
    task.reset()
    expert = make_expert(task, seed=3, action_noise=0.5)
    success: list[float] = []
    hit = 0
    while len(success) < 8:
        result = task.step(expert.perturb(expert.act()))
        hit += int(expert.perturbed.sum())
        done = np.flatnonzero(result.terminated | result.truncated)
        success += result.extras["success"][done].tolist()
        expert.reset(done)
    assert hit > 0 and np.mean(success) >= 0.75, success


def test_move_to_goal_pushes_stop_on_the_disc_in_every_direction() -> None:
    """arm_move_to_goal's push has to end within the disc's 4 cm, whichever way the disc
    lies (away from the robot or to either side): every forced push of 16 episodes
    succeeds, and the hand never turns past a quarter turn to push."""
    task = make_task(
        compose(["task=arm_move_to_goal", "task.cameras=[]"]).task, num_envs=16, seed=4
    )
    assert isinstance(task, TabletopTask)
    task.reset()
    expert = make_expert(task, seed=4)
    expert.reset(None, modes=0)  # push
    to_goal = task.goal_pos[:, :2] - task.cube_pos[:, 0, :2]  # type: ignore[attr-defined]
    bearing = np.degrees(np.arctan2(to_goal[:, 1], to_goal[:, 0]))
    assert bearing.min() < -45 and bearing.max() > 45, bearing  # both sides covered
    finished = np.zeros(16, dtype=bool)
    success = np.zeros(16, dtype=bool)
    while not finished.all():
        action = expert.act()
        assert (np.abs(task.ee_target_yaw) <= np.pi / 2 + 0.2).all()
        result = task.step(action)
        ended = (result.terminated | result.truncated) & ~finished
        success[ended] = result.extras["success"][ended] > 0
        finished |= ended
    assert success.all(), (success, bearing)
