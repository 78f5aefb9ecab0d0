"""BatchedSim against plain single-env mujoco.mj_step: same model, controls, substeps."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from unilab.sim import BatchedSim

NUM_ENVS = 4
STEPS = 40


def _reference(model: mujoco.MjModel, key: int) -> mujoco.MjData:
    data = mujoco.MjData(model)
    if key >= 0:
        mujoco.mj_resetDataKeyframe(model, data, key)
    mujoco.mj_forward(model, data)
    return data


def _observed_at_new_state(model: mujoco.MjModel, data: mujoco.MjData) -> mujoco.MjData:
    """What BatchedSim promises after step(): position/velocity stages at the new state,
    acceleration-stage values (qacc, contact sensors) of the last substep."""
    fresh = mujoco.MjData(model)
    fresh.qpos[:], fresh.qvel[:], fresh.act[:], fresh.ctrl[:] = (
        data.qpos,
        data.qvel,
        data.act,
        data.ctrl,
    )
    fresh.time = data.time
    mujoco.mj_fwdPosition(model, fresh)
    mujoco.mj_sensorPos(model, fresh)
    mujoco.mj_fwdVelocity(model, fresh)
    mujoco.mj_sensorVel(model, fresh)
    acc_stage = model.sensor_needstage == mujoco.mjtStage.mjSTAGE_ACC
    for s in np.flatnonzero(acc_stage):
        adr, dim = model.sensor_adr[s], model.sensor_dim[s]
        fresh.sensordata[adr : adr + dim] = data.sensordata[adr : adr + dim]
    return fresh


def _run_and_compare(
    model: mujoco.MjModel,
    substeps: int,
    keyframe: str | None,
    nthread: int,
    push: bool,
) -> None:
    sim = BatchedSim(model, NUM_ENVS, nthread=nthread, substeps=substeps, default_keyframe=keyframe)
    key = -1 if keyframe is None else model.key(keyframe).id
    refs = [_reference(model, key) for _ in range(NUM_ENVS)]
    rng = np.random.default_rng(7)
    controls = rng.uniform(-1.5, 1.5, size=(STEPS, NUM_ENVS, model.nu))
    for t in range(STEPS):
        if push and t == 5:
            kicked = np.array([1, 3])
            dv = np.array([[0.4, -0.2, 0.3], [-0.5, 0.1, 0.0]])
            sim.apply_push(kicked, dv)
            for row, env in enumerate(kicked):
                refs[env].qvel[0:3] += dv[row]
        if t == 9:
            sim.bind("geom_xpos")  # binding a new output mid-run must not move any trajectory
        status = sim.step(controls[t])
        assert not status.unstable.any()
        for i, data in enumerate(refs):
            data.ctrl[:] = controls[t, i]
            for _ in range(substeps):
                mujoco.mj_step(model, data)
            np.testing.assert_array_equal(sim.qpos[i], data.qpos)
            np.testing.assert_array_equal(sim.qvel[i], data.qvel)
            np.testing.assert_array_equal(sim.act[i], data.act)
            np.testing.assert_array_equal(sim.qacc[i], data.qacc)
            assert sim.time[i] == pytest.approx(data.time, abs=1e-12)
            seen = _observed_at_new_state(model, data)
            for field in ("xpos", "xquat", "site_xpos", "site_xmat", "cvel", "sensordata"):
                np.testing.assert_allclose(
                    getattr(sim, field)[i], getattr(seen, field), rtol=0, atol=1e-12, err_msg=field
                )
    # The envs were driven differently and must have diverged from one another.
    assert np.ptp(sim.qpos, axis=0).max() > 1e-3


def test_free_bodies_with_contacts_match_mj_step(free_model: mujoco.MjModel) -> None:
    _run_and_compare(free_model, substeps=5, keyframe=None, nthread=1, push=True)
    assert np.all(BatchedSim(free_model, 1).ncon >= 0)


def test_free_bodies_from_keyframe_two_threads(free_model: mujoco.MjModel) -> None:
    _run_and_compare(free_model, substeps=3, keyframe="high", nthread=2, push=False)


def test_hinge_chain_with_actuators_matches_mj_step(chain_model: mujoco.MjModel) -> None:
    _run_and_compare(chain_model, substeps=4, keyframe="bent", nthread=1, push=False)


def test_contacts_happen_in_the_free_model(free_model: mujoco.MjModel) -> None:
    sim = BatchedSim(free_model, 2, substeps=10)
    for _ in range(30):
        sim.step(np.zeros((2, free_model.nu)))
    contact = sim.sensor("box_contact")
    assert np.all(sim.ncon > 0)
    assert np.all(contact[:, 0] > 0)  # the box rests on the floor
    # at rest the net contact force carries the box's weight (2 kg)
    np.testing.assert_allclose(np.abs(contact[:, 3]), 2 * 9.81, rtol=0.05)


def test_two_threads_equal_one_thread(free_model: mujoco.MjModel) -> None:
    sims = [BatchedSim(free_model, 16, nthread=n, substeps=5, seed=3) for n in (1, 2)]
    assert sims[1].nthread == 2
    rng = np.random.default_rng(0)
    for _ in range(30):
        u = rng.uniform(-3, 3, size=(16, free_model.nu))
        for sim in sims:
            sim.step(u)
    for field in ("qpos", "qvel", "qacc", "sensordata", "xpos", "cvel"):
        np.testing.assert_array_equal(getattr(sims[0], field), getattr(sims[1], field))
