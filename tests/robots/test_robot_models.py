"""Every registered robot loads, validates and behaves physically at its home pose."""

from __future__ import annotations

from collections.abc import Iterator

import mujoco
import numpy as np
import pytest

from unilab.registry import UnknownNameError
from unilab.robots import ROBOTS, RobotSpec, get_robot, list_robots
from unilab.robots.validate import load_model

# Realistic total robot mass (kg), objects excluded: cart-pole 1.1 kg; Go1 ~12-13 kg;
# H1 ~47 kg; Panda arm ~18 kg plus hand.
MASS_RANGE_KG = {
    "cartpole": (1.0, 1.2),
    "quadruped": (11.0, 14.0),
    "humanoid": (45.0, 52.0),
    "arm": (16.0, 21.0),
    "planar_arm": (0.2, 0.25),
}
# Legged robots step at 200 Hz so that tasks control at 50 Hz with 4 substeps.
TIMESTEP = {
    "cartpole": 0.01,
    "quadruped": 0.005,
    "humanoid": 0.005,
    "arm": 0.002,
    "planar_arm": 0.01,
}


def home(spec: RobotSpec) -> tuple[mujoco.MjModel, mujoco.MjData]:
    model = load_model(spec)
    data = mujoco.MjData(model)
    assert spec.keyframe is not None
    mujoco.mj_resetDataKeyframe(model, data, model.key(spec.keyframe).id)
    mujoco.mj_forward(model, data)
    return model, data


def no_warnings(data: mujoco.MjData) -> bool:
    return all(w.number == 0 for w in data.warning)


def test_the_five_robots_are_registered() -> None:
    assert list_robots() == ["arm", "cartpole", "humanoid", "planar_arm", "quadruped"]
    assert get_robot("quadruped") is ROBOTS.get("quadruped")


def test_unknown_robot_name_lists_the_registered_ones() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown robot 'quadroped'.*quadruped"):
        get_robot("quadroped")


@pytest.mark.parametrize("name", ["arm", "cartpole", "humanoid", "planar_arm", "quadruped"])
def test_robot_loads_and_matches_its_spec(name: str) -> None:
    spec = get_robot(name)
    model = load_model(spec)  # validates names, ranges, gains and keyframe
    extra = 1 if spec.gripper_actuator else 0
    assert model.nu == len(spec.actuator_names) + extra
    assert spec.keyframe == "home" and model.key("home").id >= 0
    assert model.opt.timestep == TIMESTEP[name]
    for role, sensor in spec.sensors.items():
        assert model.sensor(sensor).id >= 0, role
    object_mass = sum(model.body_subtreemass[model.body(b).id] for b in spec.bodies.values())
    robot_mass = float(model.body_mass.sum()) - object_mass
    lo, hi = MASS_RANGE_KG[name]
    assert lo <= robot_mass <= hi, f"{name}: {robot_mass:.2f} kg outside [{lo}, {hi}]"


@pytest.mark.parametrize("name", ["quadruped", "humanoid"])
def test_legged_home_pose_puts_the_feet_on_the_floor(name: str) -> None:
    spec = get_robot(name)
    model, data = home(spec)
    assert spec.base_body is not None
    for foot in spec.feet:
        geom = model.geom(foot)
        # Lowest point of the foot: sphere radius, or box half-height for flat feet.
        half_height = geom.size[0] if geom.type[0] == mujoco.mjtGeom.mjGEOM_SPHERE else geom.size[2]
        clearance = data.geom(foot).xpos[2] - half_height
        assert 0.0 <= clearance < 0.005, f"{foot}: {clearance:.4f} m above the floor"


def run_holding_home(model: mujoco.MjModel, data: mujoco.MjData, seconds: float) -> Iterator[None]:
    """Step with ctrl fixed at the keyframe's; yield after every step."""
    for _ in range(round(seconds / model.opt.timestep)):
        mujoco.mj_step(model, data)
        yield


def test_quadruped_stands_for_two_seconds_at_the_default_pose() -> None:
    spec = get_robot("quadruped")
    model, data = home(spec)
    trunk = model.body(spec.base_body).id
    lowest, least_upright = np.inf, np.inf
    for _ in run_holding_home(model, data, 2.0):
        lowest = min(lowest, data.xpos[trunk, 2])
        least_upright = min(least_upright, data.xmat[trunk, 8])  # trunk z-axis . world z
    assert no_warnings(data)
    assert least_upright > 0.9
    assert lowest > 0.2
    # Settled, not still falling: nearly at rest, every foot carrying load.
    assert np.abs(data.qvel).max() < 0.05
    touch = [data.sensor(spec.sensors[f"touch_{leg}"]).data[0] for leg in ("FR", "FL", "RR", "RL")]
    assert min(touch) > 10.0, touch


def test_quadruped_touches_the_floor_with_its_feet_only_while_standing() -> None:
    spec = get_robot("quadruped")
    model, data = home(spec)
    for _ in run_holding_home(model, data, 1.0):
        pass
    floor = model.geom("floor").id
    feet = {model.geom(f).id for f in spec.feet}
    pairs = {(int(c.geom1), int(c.geom2)) for c in data.contact[: data.ncon]}
    assert pairs and all(floor in p and (set(p) - {floor}) <= feet for p in pairs), pairs


def test_quadruped_imu_reads_gravity_and_level_orientation_at_rest() -> None:
    spec = get_robot("quadruped")
    model, data = home(spec)
    for _ in run_holding_home(model, data, 1.0):
        pass
    acc = data.sensor(spec.sensors["accelerometer"]).data
    quat = data.sensor(spec.sensors["orientation"]).data
    assert acc[2] == pytest.approx(9.81, abs=0.3)
    assert abs(quat[0]) > 0.99


def test_humanoid_stays_up_for_half_a_second_at_the_default_pose() -> None:
    spec = get_robot("humanoid")
    model, data = home(spec)
    pelvis = model.body(spec.base_body).id
    lowest, least_upright = np.inf, np.inf
    for _ in run_holding_home(model, data, 0.5):
        lowest = min(lowest, data.xpos[pelvis, 2])
        least_upright = min(least_upright, data.xmat[pelvis, 8])
    assert no_warnings(data)
    assert lowest > 0.9
    assert least_upright > 0.95


def test_arm_holds_home_pose_and_cube_rests_on_the_table() -> None:
    spec = get_robot("arm")
    model, data = home(spec)
    arm_q = np.array([model.joint(j).qposadr[0] for j in spec.joint_names])
    cube = model.body(spec.bodies["object"]).id
    cube_start = data.xpos[cube].copy()
    worst = 0.0
    for _ in run_holding_home(model, data, 2.0):
        worst = max(worst, float(np.abs(data.qpos[arm_q] - spec.default_pose).max()))
    assert no_warnings(data)
    assert worst < 1e-3
    assert np.linalg.norm(data.xpos[cube] - cube_start) < 1e-3
    assert data.xpos[cube, 2] == pytest.approx(0.025, abs=1e-3)  # half its 5 cm side
    assert data.xmat[cube, 8] > 0.999  # still flat
    # Home keeps the hand well above the table, pointing down.
    ee = data.site(spec.end_effector_site)
    assert ee.xpos[2] > 0.3 and ee.xmat[8] < -0.99


def test_arm_position_actuators_track_a_step_in_every_joint() -> None:
    spec = get_robot("arm")
    model, data = home(spec)
    target = np.array(spec.default_pose) + 0.2
    data.ctrl[: len(spec.actuator_names)] = target
    for _ in run_holding_home(model, data, 2.0):
        pass
    arm_q = [model.joint(j).qposadr[0] for j in spec.joint_names]
    assert np.abs(data.qpos[arm_q] - target).max() < 0.01


def _ik_down(model: mujoco.MjModel, data: mujoco.MjData, site: str, goal: np.ndarray) -> np.ndarray:
    """Damped least-squares IK for the 7 arm joints: site at goal, site z-axis pointing down."""
    scratch = mujoco.MjData(model)
    scratch.qpos[:] = data.qpos
    sid = model.site(site).id
    jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    for _ in range(100):
        mujoco.mj_kinematics(model, scratch)
        mujoco.mj_comPos(model, scratch)
        z_axis = scratch.site_xmat[sid].reshape(3, 3)[:, 2]
        err = np.concatenate([goal - scratch.site_xpos[sid], np.cross(z_axis, [0.0, 0.0, -1.0])])
        mujoco.mj_jacSite(model, scratch, jacp, jacr, sid)
        jac = np.vstack([jacp[:, :7], jacr[:, :7]])
        scratch.qpos[:7] += jac.T @ np.linalg.solve(jac @ jac.T + 1e-4 * np.eye(6), err)
    return scratch.qpos[:7].copy()


def test_arm_gripper_grasps_and_lifts_the_cube() -> None:
    spec = get_robot("arm")
    model, data = home(spec)
    assert spec.end_effector_site is not None and spec.gripper_actuator is not None
    grip = model.actuator(spec.gripper_actuator).id
    cube = model.body(spec.bodies["object"]).id
    start = data.xpos[cube].copy()

    def move(q: np.ndarray, opening: float, seconds: float) -> None:
        # Ramp the joint targets so the hand follows a gentle path, then hold.
        q0, n = data.ctrl[:7].copy(), round(seconds / model.opt.timestep)
        data.ctrl[grip] = opening
        for k in range(n):
            a = min(1.0, (k + 1) / (0.6 * n))
            data.ctrl[:7] = (1 - a) * q0 + a * q
            mujoco.mj_step(model, data)

    site = spec.end_effector_site
    above = _ik_down(model, data, site, start + np.array([0.0, 0.0, 0.15]))
    move(above, 0.04, 1.5)
    data_at = mujoco.MjData(model)
    data_at.qpos[:] = data.qpos
    at = _ik_down(model, data_at, site, start)
    move(at, 0.04, 1.5)
    move(at, 0.0, 1.0)
    finger = data.qpos[model.joint("finger_left").qposadr[0]]
    assert finger == pytest.approx(0.025, abs=0.003)  # closed on the 5 cm cube
    move(above, 0.0, 2.0)
    assert no_warnings(data)
    assert data.xpos[cube, 2] > start[2] + 0.12, "cube was not lifted"
    assert np.linalg.norm(data.xpos[cube] - data.site(site).xpos) < 0.01, "cube slipped"


def test_cartpole_motor_pushes_the_cart_with_ten_newtons_at_full_action() -> None:
    spec = get_robot("cartpole")
    model, data = home(spec)
    assert spec.control_mode == "force"
    data.ctrl[model.actuator(spec.actuator_names[0]).id] = 1.0 * spec.action_scale
    mujoco.mj_forward(model, data)
    # Upright pole (a thin rod, hinged at its end) on a cart: the cart's first acceleration
    # is F / (m_cart + m_pole / 4), and the pole starts to tip backwards.
    assert data.qacc[0] == pytest.approx(spec.effort_limit[0] / (1.0 + 0.1 / 4), rel=0.03)
    assert data.qacc[1] < 0


def test_planar_arm_servos_turn_it_half_a_turn_in_about_a_second() -> None:
    """A half-turn step of the shoulder target: the stretched-out arm gets there in 0.6-1.5 s
    and settles without warnings; the servo torque saturates at the 0.1 N m limit."""
    spec = get_robot("planar_arm")
    model, data = home(spec)
    assert spec.control_mode == "position" and spec.effort_limit == (0.1, 0.1)
    data.ctrl[model.actuator(spec.actuator_names[0]).id] = 3.0
    arrived = None
    for step, _ in enumerate(run_holding_home(model, data, 2.0)):
        if step == 0:
            assert data.qfrc_actuator[0] == pytest.approx(0.1)  # saturated at the limit
        if arrived is None and data.qpos[0] > 2.9:
            arrived = (step + 1) * model.opt.timestep
    assert no_warnings(data)
    assert arrived is not None and 0.6 < arrived < 1.5
    assert data.qpos[0] == pytest.approx(3.0, abs=0.02) and abs(data.qpos[1]) < 0.02
