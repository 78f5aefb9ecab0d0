"""Domain randomization: values land in the intended envs and fields, within their ranges."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from mujoco import batch as mjbatch
from sim_test_models import FREE_XML

from unilab.sim import BatchedSim, DomainRandomization

NUM_ENVS = 10


def _fields(sim: BatchedSim) -> dict[str, np.ndarray]:
    assert sim.randomizer is not None
    return {name: values.copy() for name, values in sim.randomizer.fields.items()}


def test_free_model_fields_land_in_range_and_only_in_reset_envs(
    free_model_movable_com: mujoco.MjModel,
) -> None:
    m = free_model_movable_com
    dr = DomainRandomization(
        friction_scale=(0.4, 0.9),
        friction_geoms=("floor", "box_geom"),
        mass_scale=(0.8, 1.25),
        mass_add=(0.0, 0.5),
        mass_bodies=("box", "ball"),
        com_offset=(-0.02, 0.03),
        com_bodies=("box",),
    )
    sim = BatchedSim(m, NUM_ENVS, seed=4, randomization=dr)
    before = _fields(sim)
    assert set(before) == {"geom_friction", "body_mass", "body_inertia", "body_ipos"}

    friction = before["geom_friction"]
    picked = [m.geom("floor").id, m.geom("box_geom").id]
    ratio = friction[:, picked] / m.geom_friction[picked]
    assert np.all((ratio >= 0.4) & (ratio <= 0.9))
    np.testing.assert_allclose(ratio, ratio[:, :1, :1] * np.ones_like(ratio))  # one factor per env
    assert np.ptp(ratio[:, 0, 0]) > 0.05  # envs differ
    rest = [g for g in range(m.ngeom) if g not in picked]
    np.testing.assert_array_equal(
        friction[:, rest], np.broadcast_to(m.geom_friction[rest], (NUM_ENVS, len(rest), 3))
    )

    bodies = [m.body("box").id, m.body("ball").id]
    mass = before["body_mass"][:, bodies]
    m0 = m.body_mass[bodies]
    assert np.all((mass >= m0 * 0.8) & (mass <= m0 * 1.25 + 0.5))
    inertia_ratio = before["body_inertia"][:, bodies] / m.body_inertia[bodies]
    np.testing.assert_allclose(inertia_ratio, np.repeat((mass / m0)[:, :, None], 3, axis=2))
    pin = m.body("pin").id
    assert np.all(before["body_mass"][:, pin] == m.body_mass[pin])
    # set_const ran: the derived subtree masses follow the new masses
    subtree = sim.batch.expanded("body_subtreemass")
    assert subtree is not None
    np.testing.assert_allclose(subtree[:, 0], before["body_mass"].sum(axis=1))

    offset = before["body_ipos"][:, m.body("box").id] - m.body_ipos[m.body("box").id]
    assert np.all((offset >= -0.02) & (offset <= 0.03))
    np.testing.assert_array_equal(
        before["body_ipos"][:, pin], np.tile(m.body_ipos[pin], (NUM_ENVS, 1))
    )

    chosen = np.array([3, 7])
    sim.reset(chosen)
    after = _fields(sim)
    others = np.setdiff1d(np.arange(NUM_ENVS), chosen)
    for name in before:
        np.testing.assert_array_equal(after[name][others], before[name][others], err_msg=name)
        assert not np.array_equal(after[name][chosen], before[name][chosen]), name
    sim.reset([5], randomize=False)
    np.testing.assert_array_equal(_fields(sim)["body_mass"], after["body_mass"])


def test_actuator_gains_and_damping_on_hinge_chain(chain_model: mujoco.MjModel) -> None:
    m = chain_model
    dr = DomainRandomization(
        actuator_gain_scale=(0.5, 2.0),
        joint_damping_scale=(1.5, 3.0),
        damping_joints=("j2", "j4"),
    )
    sim = BatchedSim(m, NUM_ENVS, seed=9, randomization=dr)
    f = _fields(sim)
    gain, bias = f["actuator_gainprm"], f["actuator_biasprm"]
    scale = gain[:, :, 0] / m.actuator_gainprm[:, 0]
    assert np.all((scale >= 0.5) & (scale <= 2.0))
    p2, v3, m1, p4 = (m.actuator(n).id for n in ("p2", "v3", "m1", "p4"))
    # position actuators stay PD around their target: biasprm[1] = -kp, kv untouched
    np.testing.assert_allclose(bias[:, p2, 1], -gain[:, p2, 0])
    np.testing.assert_allclose(bias[:, p4, 1], -gain[:, p4, 0])
    np.testing.assert_array_equal(bias[:, p2, 2], m.actuator_biasprm[p2, 2])
    # velocity actuators: biasprm[2] = -kv
    np.testing.assert_allclose(bias[:, v3, 2], -gain[:, v3, 0])
    np.testing.assert_array_equal(bias[:, v3, 1], 0.0)
    np.testing.assert_array_equal(bias[:, m1], 0.0)  # a motor has no bias
    np.testing.assert_array_equal(
        gain[:, :, 1:], np.broadcast_to(m.actuator_gainprm[:, 1:], gain[:, :, 1:].shape)
    )

    damping = f["dof_damping"]
    d2, d4 = m.joint("j2").dofadr[0], m.joint("j4").dofadr[0]
    for dof in (d2, d4):
        ratio = damping[:, dof] / m.dof_damping[dof]
        assert np.all((ratio >= 1.5) & (ratio <= 3.0))
    for joint in ("j1", "j3"):
        dof = m.joint(joint).dofadr[0]
        np.testing.assert_array_equal(damping[:, dof], m.dof_damping[dof])
    assert sim.randomizer is not None and not sim.randomizer.needs_set_const


def test_physics_sees_the_randomized_values(free_model: mujoco.MjModel) -> None:
    heavy = DomainRandomization(mass_scale=(2.0, 2.0), mass_bodies=("box",))
    sims = [
        BatchedSim(free_model, 2, substeps=10),
        BatchedSim(free_model, 2, substeps=10, randomization=heavy),
    ]
    for sim in sims:
        for _ in range(40):
            sim.step(np.zeros((2, free_model.nu)))
    light, doubled = (np.abs(s.sensor("box_contact")[:, 3]) for s in sims)
    np.testing.assert_allclose(doubled / light, 2.0, rtol=0.02)
    # a unit scale writes the nominal values: the trajectory is the nominal one, bit for bit
    unit = DomainRandomization(actuator_gain_scale=(1.0, 1.0), joint_damping_scale=(1.0, 1.0))
    pair = [
        BatchedSim(free_model, 2, substeps=3),
        BatchedSim(free_model, 2, substeps=3, randomization=unit),
    ]
    for sim in pair:
        for t in range(20):
            sim.step(np.full((2, free_model.nu), np.sin(t)))
    np.testing.assert_array_equal(pair[0].qpos, pair[1].qpos)


def test_default_config_expands_nothing(free_model: mujoco.MjModel) -> None:
    sim = BatchedSim(free_model, 3)
    assert sim.randomizer is None and not sim.randomization.enabled
    assert all(sim.batch.expanded(name) is None for name in mjbatch.MODEL_FIELDS)


def test_config_validation(free_model: mujoco.MjModel) -> None:
    with pytest.raises(ValueError, match=r"friction_scale must be finite with low <= high"):
        DomainRandomization(friction_scale=(1.2, 0.8))
    with pytest.raises(ValueError, match="mass_scale low must be > 0"):
        DomainRandomization(mass_scale=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"\(low, high\) pair"):
        DomainRandomization(com_offset=(0.1,))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sequence of names"):
        DomainRandomization(mass_bodies="box")  # type: ignore[arg-type]
    assert DomainRandomization(mass_scale=[0.5, 1.5]).mass_scale == (0.5, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"mass -0.7 kg <= 0"):
        BatchedSim(
            free_model,
            2,
            randomization=DomainRandomization(mass_add=(-1.0, 0.0), mass_bodies=("pin",)),
        )
    with pytest.raises(KeyError, match="unknown body 'torso'"):
        BatchedSim(
            free_model,
            2,
            randomization=DomainRandomization(com_offset=(0, 0.1), com_bodies=("torso",)),
        )


def test_com_offset_matches_a_model_compiled_with_that_offset(
    free_model: mujoco.MjModel, free_model_movable_com: mujoco.MjModel
) -> None:
    offset = 0.015
    dr = DomainRandomization(com_offset=(offset, offset), com_bodies=("box",))
    sim = BatchedSim(free_model_movable_com, 2, substeps=4, randomization=dr)
    spec = mujoco.MjSpec.from_string(FREE_XML)
    box = free_model.body("box").id
    body = spec.body("box")
    body.explicitinertial = True
    body.mass = free_model.body_mass[box]
    body.ipos = free_model.body_ipos[box] + offset
    body.iquat = free_model.body_iquat[box]
    body.inertia = free_model.body_inertia[box]
    shifted = spec.compile()
    data = mujoco.MjData(shifted)
    mujoco.mj_forward(shifted, data)
    for t in range(60):
        u = np.full((2, free_model.nu), np.cos(t / 5))
        sim.step(u)
        data.ctrl[:] = u[0]
        for _ in range(4):
            mujoco.mj_step(shifted, data)
    np.testing.assert_allclose(sim.qpos[0], data.qpos, rtol=0, atol=1e-10)
    nominal = BatchedSim(free_model_movable_com, 1, substeps=4)
    for t in range(60):
        nominal.step(np.full((1, free_model.nu), np.cos(t / 5)))
    assert np.abs(sim.qpos[0] - nominal.qpos[0]).max() > 1e-3  # the offset changed the motion
    # a simple body's mass-matrix structure cannot follow a moved COM: refused, with the fix
    with pytest.raises(ValueError, match=r"\['box'\] are simple: set simple=\"false\""):
        BatchedSim(free_model, 1, randomization=dr)
    with pytest.raises(ValueError, match=r"com_offset .* selects nothing"):
        BatchedSim(free_model, 1, randomization=DomainRandomization(com_offset=(0, 0.01)))


def test_mass_scale_matches_a_model_compiled_with_that_mass(free_model: mujoco.MjModel) -> None:
    dr = DomainRandomization(mass_scale=(1.5, 1.5), mass_bodies=("box",), friction_scale=(0.5, 0.5))
    sim = BatchedSim(free_model, 1, substeps=4, randomization=dr)
    spec = mujoco.MjSpec.from_string(FREE_XML)
    spec.geom("box_geom").mass = 3.0  # 1.5 x 2 kg; the compiler scales the inertia with it
    for geom in spec.geoms:
        geom.friction = [0.5 * f for f in geom.friction]
    heavier = spec.compile()
    data = mujoco.MjData(heavier)
    mujoco.mj_forward(heavier, data)
    for t in range(60):
        u = np.full((1, free_model.nu), 3 * np.sin(t / 7))
        sim.step(u)
        data.ctrl[:] = u[0]
        for _ in range(4):
            mujoco.mj_step(heavier, data)
    np.testing.assert_allclose(sim.qpos[0], data.qpos, rtol=0, atol=1e-10)
