"""arm_reach and arm_lift_cube on the real arm scene: shapes, rewards, successes, terminations,
resets, and a Jacobian controller that shows the success metric can fire."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.config import compose
from unilab.tasks.arm_lift_cube import ArmLiftCube
from unilab.tasks.arm_reach import ArmReach, ArmTask
from unilab.tasks.registry import make_task

TASKS = ("arm_reach", "arm_lift_cube")


def make(name: str, num_envs: int = 4, seed: int = 0, *overrides: str) -> ArmTask:
    cfg = compose([f"task={name}", *overrides])
    task = make_task(cfg.task, num_envs=num_envs, seed=seed)
    assert isinstance(task, ArmTask)
    return task


def reach(num_envs: int = 4, seed: int = 0, *overrides: str) -> ArmReach:
    task = make("arm_reach", num_envs, seed, *overrides)
    assert isinstance(task, ArmReach)
    return task


def lift(num_envs: int = 4, seed: int = 0, *overrides: str) -> ArmLiftCube:
    task = make("arm_lift_cube", num_envs, seed, *overrides)
    assert isinstance(task, ArmLiftCube)
    return task


def jacobian_actions(task: ArmTask, goal: np.ndarray, max_dq: float = 0.2) -> np.ndarray:
    """Arm actions that move the end effector toward goal: one damped least-squares step."""
    hand = task.model.body("hand").id
    jacp, _ = task.sim.batch.jac(hand, task.ee_pos.copy())
    jac = jacp[:, :, task._dof_adr]
    err = goal - task.ee_pos
    jjt = jac @ jac.transpose(0, 2, 1) + 1e-2 * np.eye(3)
    dq = (jac.transpose(0, 2, 1) @ np.linalg.solve(jjt, err[..., None]))[..., 0]
    target = task.joint_pos + np.clip(dq, -max_dq, max_dq)
    actions = np.zeros((task.num_envs, task.action_dim), dtype=np.float32)
    actions[:, :7] = (target - task._default_pose) / task.robot.action_scale
    return actions


@pytest.mark.parametrize("name", TASKS)
def test_observations_rewards_and_metrics_are_finite_with_the_right_shapes(name: str) -> None:
    task = make(name, num_envs=5)
    obs = task.reset()
    dims = task.obs_dims
    rng = np.random.default_rng(0)
    for _ in range(10):
        result = task.step(rng.uniform(-3, 3, (5, task.action_dim)).astype(np.float32))
        for group, values in (*result.obs.items(), *result.final_obs.items()):
            assert values.shape == (5, dims[group]) and values.dtype == np.float32
            assert np.isfinite(values).all(), group
        on = {k for k, w in task.default_reward_weights.items() if w != 0}  # 0: off by default
        assert set(result.reward_terms) == on
        for term, values in result.reward_terms.items():
            assert values.shape == (5,) and np.isfinite(values).all(), term
        assert result.reward.shape == (5,) and np.isfinite(result.reward).all()
        assert {"success"} <= set(result.extras)
        for metric, values in result.extras.items():
            assert values.shape == (5,) and np.isfinite(values).all(), metric
    assert set(obs) == {"policy"}
    assert task.action_dim == (7 if name == "arm_reach" else 8)


@pytest.mark.parametrize("name", TASKS)
def test_time_outs_are_truncations_not_terminations(name: str) -> None:
    task = make(name, 3, 0, "task.episode_length_s=0.1")  # 5 control steps
    task.reset()
    zeros = np.zeros((3, task.action_dim), dtype=np.float32)
    for _ in range(4):
        result = task.step(zeros)
        assert not result.truncated.any() and not result.terminated.any()
    result = task.step(zeros)
    assert result.truncated.all() and not result.terminated.any()
    assert result.reasons["time_out"].all()
    assert np.isfinite(result.episode_return).all() and (result.episode_length == 5).all()
    assert (task.episode_step == 0).all()  # auto-reset started new episodes


def test_jacobian_controller_makes_reach_report_success() -> None:
    task = reach(8, 3)
    task.reset()
    offsets = np.random.default_rng(1).uniform(-0.1, 0.1, (8, 3))
    offsets[:, 0] = 0.08  # every target starts at least 8 cm away
    task.set_target(np.arange(8), task.ee_pos + offsets)
    first = task.step(np.zeros((8, 7), dtype=np.float32))
    assert first.extras["success"].sum() == 0
    for _ in range(60):
        result = task.step(jacobian_actions(task, task.target))
    assert result.extras["success"].all(), result.extras["distance"]
    assert (result.extras["distance"] < task.cfg.success_tolerance).all()
    assert result.reward_terms["tracking"].mean() > first.reward_terms["tracking"].mean()


def test_reach_reward_is_higher_near_the_target_than_far() -> None:
    task = reach(6)
    task.reset()
    ee = task.ee_pos.copy()
    offsets = np.zeros((6, 3))
    offsets[:, 2] = [0.0, 0.01, 0.03, 0.1, 0.2, 0.4]
    task.set_target(np.arange(6), ee + offsets)
    coarse, fine = task.reward_tracking(), task.reward_tracking_fine()
    assert (np.diff(coarse) < 0).all(), coarse
    assert (np.diff(fine[:4]) < 0).all() and (np.diff(fine) <= 0).all(), fine  # 0 far away
    result = task.step(np.zeros((6, 7), dtype=np.float32))
    assert (np.diff(result.reward) < 0).all(), result.reward


def test_mocap_marker_follows_the_target_per_env() -> None:
    task = reach(4, 0, "task.resample_s=0.1")
    task.reset()
    marker = task.sim.bind("mocap_pos")[:, 0]
    np.testing.assert_array_equal(marker, task.target)
    assert len({tuple(t) for t in task.target}) == 4  # one target per env
    low, high = np.array(task.cfg.target_low), np.array(task.cfg.target_high)
    assert ((task.target >= low) & (task.target <= high)).all()
    before = task.target.copy()
    zeros = np.zeros((4, 7), dtype=np.float32)
    for _ in range(4):
        task.step(zeros)
    np.testing.assert_array_equal(task.target, before)
    task.step(zeros)  # 5th step = 0.1 s: a new target mid-episode, shown and observed
    assert (task.target != before).all(axis=1).all()
    np.testing.assert_array_equal(marker, task.target)
    obs = task.observe()["policy"]
    np.testing.assert_allclose(obs[:, 17:20], task.target, rtol=1e-6)


def test_reach_reset_changes_only_the_chosen_envs() -> None:
    task = reach(4)
    task.reset()
    rng = np.random.default_rng(0)
    for _ in range(5):
        task.step(rng.uniform(-1, 1, (4, 7)).astype(np.float32))
    qpos, qvel, target = task.sim.qpos.copy(), task.sim.qvel.copy(), task.target.copy()
    task.reset_envs(np.array([1, 3]))
    kept = [0, 2]
    np.testing.assert_array_equal(task.sim.qpos[kept], qpos[kept])
    np.testing.assert_array_equal(task.sim.qvel[kept], qvel[kept])
    np.testing.assert_array_equal(task.target[kept], target[kept])
    assert (task.target[[1, 3]] != target[[1, 3]]).all()
    assert (task.sim.qvel[[1, 3]] == 0).all()
    offsets = task.joint_pos[[1, 3]] - np.array(task.robot.default_pose)
    assert (np.abs(offsets) <= task.cfg.init_joint_noise + 1e-9).all()


def test_lift_reset_changes_only_the_chosen_envs_and_places_the_cube_on_the_table() -> None:
    task = lift(4)
    task.reset()
    for _ in range(3):
        task.step(np.ones((4, 8), dtype=np.float32))
    qpos, goal = task.sim.qpos.copy(), task.goal.copy()
    task.reset_envs(np.array([2]))
    kept = [0, 1, 3]
    np.testing.assert_array_equal(task.sim.qpos[kept], qpos[kept])
    np.testing.assert_array_equal(task.goal[kept], goal[kept])
    cube = task.cube_pos[2]
    assert task.cfg.cube_low[0] <= cube[0] <= task.cfg.cube_high[0]
    assert task.cfg.cube_low[1] <= cube[1] <= task.cfg.cube_high[1]
    assert cube[2] == pytest.approx(0.025)
    np.testing.assert_array_equal(task.sim.bind("mocap_pos")[:, 0], task.goal)


def test_cube_pushed_off_the_table_terminates_only_that_env() -> None:
    task = lift(3)
    task.reset()
    cube = task._cube_qpos
    task.sim.qpos[1, cube : cube + 3] = [1.2, 0.0, -0.3]  # beside the table, below its top
    result = task.step(np.zeros((3, 8), dtype=np.float32))
    assert result.terminated.tolist() == [False, True, False]
    assert result.reasons["cube_off_table"].tolist() == [False, True, False]
    assert not result.truncated.any()
    assert task.cube_pos[1, 2] == pytest.approx(0.025)  # auto-reset put it back on the table
    assert result.final_obs["policy"][1, 20] < -0.3  # cube z (policy obs) before the reset


def test_fingers_closing_on_the_cube_count_as_a_grasp_and_hold_it() -> None:
    task = lift(2)
    task.reset()
    cube = task._cube_qpos
    task.sim.qpos[:, cube : cube + 3] = task.ee_pos  # the cube between the open fingers
    task.sim.qpos[:, cube + 3 : cube + 7] = task.sim.xquat[:, task.model.body("hand").id]
    task.sim.batch.forward()
    actions = np.zeros((2, 8), dtype=np.float32)
    actions[0, 7] = -1.0  # env 0 closes the gripper, env 1 keeps it open
    actions[1, 7] = 1.0
    for _ in range(25):
        result = task.step(actions)
    assert result.extras["grasped"].tolist() == [1.0, 0.0]
    assert result.reward_terms["grasp"][0] > 0 and result.reward_terms["grasp"][1] == 0
    assert task.cube_pos[0, 2] > 0.4  # held in the air at the hand
    assert task.cube_pos[1, 2] < 0.1  # dropped onto the table
    assert result.extras["success"].tolist() == [1.0, 0.0]
    assert result.reward_terms["lift"][0] > 0 and result.reward_terms["lift"][1] == 0


@pytest.mark.parametrize("name", TASKS)
def test_unknown_reward_term_is_a_clear_error(name: str) -> None:
    with pytest.raises(ValueError, match=r"unknown reward term\(s\) trackin.*terms are"):
        make(name, 2, 0, "task.reward_weights={trackin: 1.0}")


def test_bad_boxes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="target_low"):
        reach(2, 0, "task.target_low=[0.6,0.0,0.1]", "task.target_high=[0.3,0.1,0.2]")
    with pytest.raises(ValueError, match="goal_low"):
        lift(2, 0, "task.goal_low=[0.4,0.0]")


def test_targets_are_part_of_the_task_state_for_resume() -> None:
    task = reach(3)
    task.reset()
    state = task.get_state()
    assert "target" in state and state["target"].shape == (3, 3)
    other = reach(3, seed=9)
    other.reset()
    other.set_state(state)
    np.testing.assert_array_equal(other.target, task.target)
