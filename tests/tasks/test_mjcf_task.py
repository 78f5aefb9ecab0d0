"""The mjcf task on real models: gymnasium's ant.xml, our quadruped scene, and small MJCF
files written here for the action mapping and the error paths."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from unilab.config import compose
from unilab.tasks import make_task
from unilab.tasks.mjcf import MjcfConfig, MjcfTask, resolve_mjcf_path

ANT = "gymnasium:ant.xml"


def ant(num_envs: int = 4, seed: int = 0, **kw: object) -> MjcfTask:
    cfg = MjcfConfig(mjcf_path=ANT, control_dt=0.05, episode_length_s=50.0, **kw)  # type: ignore[arg-type]
    task = make_task(cfg, num_envs=num_envs, seed=seed)
    assert isinstance(task, MjcfTask)
    return task


def random_actions(task: MjcfTask, steps: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (steps, task.num_envs, task.action_dim)).astype(np.float32)


MOTOR_XML = """
<mujoco>
  <option timestep="0.004"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>
    <body name="cart" pos="0 0 0.1">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="slide" ctrlrange="0 2"/>
    <motor name="twist" joint="hinge" ctrllimited="false"/>
  </actuator>
</mujoco>
"""


def test_resolves_gymnasium_ant_without_a_site_packages_path() -> None:
    path = resolve_mjcf_path(ANT)
    assert path.name == "ant.xml" and path.is_file()
    assert "gymnasium" in path.parts


def test_ant_shapes_spec_and_finite_rollout() -> None:
    task = ant(num_envs=6, healthy_z_range=[0.2, 1.0])
    assert task.substeps == 5 and task.action_dim == 8
    assert task.robot.joint_names[:2] == ("hip_4", "ankle_4")  # actuator order of ant.xml
    assert task.robot.base_body == "torso" and task.robot.control_mode == "force"
    assert task.robot.kp == (0.0,) * 8
    # qpos without root x, y (13) + qvel (14)
    obs = task.reset()
    assert obs["policy"].shape == (6, 27) and obs["policy"].dtype == np.float32
    for a in random_actions(task, 30):
        res = task.step(a)
        assert res.obs["policy"].shape == (6, 27)
        assert np.isfinite(res.obs["policy"]).all() and np.isfinite(res.reward).all()
        assert np.abs(res.obs["policy"][:, 13:]).max() <= 10.0  # qvel_clip
    assert set(res.reward_terms) == {"forward_velocity", "healthy", "ctrl_cost"}
    assert task.metadata()["joint_names"] == list(task.robot.joint_names)


def test_forward_velocity_is_body_displacement_over_control_dt() -> None:
    task = ant(num_envs=3, reset_noise_scale=0.0)
    task.reset()
    actions = random_actions(task, 3)
    for a in actions:
        x0 = task.sim.xpos[:, 1, 0].copy()
        res = task.step(a)
        velocity = (task.sim.xpos[:, 1, 0] - x0) / 0.05
        np.testing.assert_allclose(res.reward_terms["forward_velocity"], velocity * 0.05, rtol=1e-5)
        ctrl_cost = -0.5 * 0.05 * np.sum(a * a, axis=1)
        np.testing.assert_allclose(res.reward_terms["ctrl_cost"], ctrl_cost, rtol=1e-5)
        np.testing.assert_allclose(res.reward_terms["healthy"], 0.05)


def test_unhealthy_body_terminates_and_resets_only_that_env() -> None:
    task = ant(num_envs=3, healthy_z_range=[0.2, 1.0], reset_noise_scale=0.0)
    task.reset()
    qpos = task.sim.qpos[0].copy()
    qpos[2] = 2.5  # far above the healthy range: still there after one 0.05 s step
    task.sim.reset([0], qpos=qpos)
    res = task.step(np.zeros((3, 8), np.float32))
    assert res.terminated.tolist() == [True, False, False]
    assert res.reasons["unhealthy"].tolist() == [True, False, False]
    assert not res.truncated.any()
    assert res.final_obs["policy"][0, 0] > 2.0  # torso z of the ended episode
    assert 0.2 < res.obs["policy"][0, 0] < 1.0  # the new episode starts healthy
    assert task.episode_step.tolist() == [0, 1, 1]


def test_time_out_truncates_without_terminating() -> None:
    cfg = MjcfConfig(mjcf_path=ANT, control_dt=0.05, episode_length_s=0.25, reset_noise_scale=0)
    task = make_task(cfg, num_envs=2)  # 5 control steps per episode
    task.reset()
    ends = [task.step(np.zeros((2, 8), np.float32)) for _ in range(5)]
    assert not any(r.truncated.any() for r in ends[:4])
    assert ends[4].truncated.all() and not ends[4].terminated.any()
    assert ends[4].episode_length.tolist() == [5, 5]
    assert ends[4].reasons["time_out"].all()


def test_reset_noise_is_ant_like_and_off_at_zero() -> None:
    noisy, still = ant(num_envs=64, seed=1), ant(num_envs=4, reset_noise_scale=0.0)
    noisy.reset()
    still.reset()
    q0 = noisy.model.qpos0
    dq = noisy.sim.qpos - q0
    assert 0.05 < np.abs(dq).max() <= 0.1 + 1e-12
    assert 0.07 < noisy.sim.qvel.std() < 0.13  # normal with scale 0.1
    np.testing.assert_array_equal(still.sim.qpos, np.broadcast_to(q0, still.sim.qpos.shape))
    np.testing.assert_array_equal(still.sim.qvel, 0.0)


def test_contact_forces_in_observation_and_cost() -> None:
    task = ant(num_envs=2, include_cfrc=True, reset_noise_scale=0.0)
    task.reset()
    for _ in range(20):  # falls onto its legs
        res = task.step(np.zeros((2, 8), np.float32))
    nbody = task.model.nbody
    assert res.obs["policy"].shape == (2, 27 + 6 * (nbody - 1))
    cfrc = res.obs["policy"][:, 27:]
    assert np.abs(cfrc).max() > 0.0 and np.abs(cfrc).max() <= 1.0
    assert (res.reward_terms["contact_cost"] < 0).all()


def test_ctrl_mode_maps_onto_ctrlrange(tmp_path: Path) -> None:
    path = tmp_path / "motor.xml"
    path.write_text(MOTOR_XML)
    cfg = MjcfConfig(mjcf_path=str(path), control_dt=0.02, action_scale=3.0)
    task = make_task(cfg, num_envs=3)
    assert task.substeps == 5 and task.robot.joint_names == ("slide", "hinge")
    ctrl = task.action_to_ctrl(np.array([[-1, -1], [0, 0.5], [1, 1]], np.float32))
    # push: ctrlrange [0, 2] -> affine; twist: no range -> action_scale * action
    np.testing.assert_allclose(ctrl, [[0, -3], [1, 1.5], [2, 3]])


def test_position_mode_on_quadruped_scene_uses_keyframe_and_gains() -> None:
    cfg = MjcfConfig(
        mjcf_path="robot:quadruped", control_dt=0.02, action_mode="position", keyframe="home"
    )
    task = make_task(cfg, num_envs=2)
    from unilab.robots import get_robot

    spec = get_robot("quadruped")
    assert task.substeps == 4
    assert task.robot.joint_names == spec.joint_names
    np.testing.assert_allclose(task.robot.default_pose, spec.default_pose)
    np.testing.assert_allclose(task.robot.kp, spec.kp)
    np.testing.assert_allclose(task.robot.kd, spec.kd)
    a = np.full((2, 12), 0.5, np.float32)
    np.testing.assert_allclose(task.action_to_ctrl(a)[0], np.add(spec.default_pose, 0.125))


def test_preset_trains_gymnasium_ant_with_no_code() -> None:
    cfg = compose(["task=mjcf"])
    assert cfg.task.mjcf_path == ANT and cfg.task.control_dt == pytest.approx(0.05)
    task = make_task(cfg.task, num_envs=2)
    assert task.max_episode_steps == 1000 and task.substeps == 5
    assert task.terminations().keys() == {"unhealthy"}


# -- bad input -----------------------------------------------------------------------------
def test_missing_path_is_required() -> None:
    with pytest.raises(ValueError, match=r"task\.mjcf_path is required"):
        make_task(MjcfConfig(), num_envs=1)


def test_nonexistent_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "robot.xml"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        make_task(MjcfConfig(mjcf_path=str(missing)), num_envs=1)


def test_unknown_gymnasium_asset_lists_the_available_ones() -> None:
    with pytest.raises(FileNotFoundError, match=r"gymnasium has no asset 'antt.xml'.*ant\.xml"):
        resolve_mjcf_path("gymnasium:antt.xml")


def test_malformed_xml_names_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "broken.xml"
    bad.write_text("<mujoco><worldbody><body></mujoco>")
    with pytest.raises(ValueError, match=r"MuJoCo could not load .*broken\.xml"):
        make_task(MjcfConfig(mjcf_path=str(bad)), num_envs=1)


def test_control_dt_must_be_a_multiple_of_the_timestep() -> None:
    with pytest.raises(ValueError, match=r"control_dt=0.015 is not a whole multiple .* 0.01"):
        make_task(MjcfConfig(mjcf_path=ANT, control_dt=0.015), num_envs=1)


def test_position_mode_rejects_motors() -> None:
    with pytest.raises(ValueError, match=r"needs position actuators.*action_mode=ctrl"):
        make_task(MjcfConfig(mjcf_path=ANT, action_mode="position"), num_envs=1)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"keyframe": "crouch"}, "task.keyframe: unknown keyframe 'crouch'"),
        ({"body": "tail"}, "task.body: unknown body 'tail'"),
        ({"action_mode": "torque"}, "task.action_mode='torque'"),
        ({"objective": "jump"}, "task.objective='jump'"),
        ({"healthy_z_range": [1.0, 0.2]}, "task.healthy_z_range"),
    ],
)
def test_bad_settings_name_the_key(override: dict[str, object], message: str) -> None:
    cfg = MjcfConfig(mjcf_path=ANT, control_dt=0.05, **override)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape(message)):
        make_task(cfg, num_envs=1)


def test_objective_none_gives_zero_reward_until_terms_are_enabled() -> None:
    task = ant(num_envs=2, objective="none")
    task.reset()
    assert task.step(np.ones((2, 8), np.float32)).reward.tolist() == [0.0, 0.0]
    on = ant(num_envs=2, objective="none", reward_weights={"ctrl_cost": -1.0})
    on.reset()
    np.testing.assert_allclose(on.step(np.ones((2, 8), np.float32)).reward, -8 * 0.05)
