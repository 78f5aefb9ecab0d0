"""Sparse resets, snapshots, determinism and input errors of BatchedSim."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from unilab.sim import BatchedSim, DomainRandomization

STATE_AND_OUTPUTS = ("qpos", "qvel", "ctrl", "act", "time", "qacc", "xpos", "sensordata", "cvel")


def _advance(sim: BatchedSim, steps: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        sim.step(rng.uniform(-1, 1, size=sim.ctrl.shape))


def _copies(sim: BatchedSim) -> dict[str, np.ndarray]:
    return {f: getattr(sim, f).copy() for f in STATE_AND_OUTPUTS}


def test_sparse_reset_changes_only_chosen_envs(chain_model: mujoco.MjModel) -> None:
    sim = BatchedSim(chain_model, 8, substeps=3)
    _advance(sim, 20)
    before = _copies(sim)
    chosen = np.array([1, 4, 6])
    sim.reset(chosen, keyframe="bent")
    others = np.setdiff1d(np.arange(8), chosen)
    key = chain_model.key("bent")
    for field, old in before.items():
        np.testing.assert_array_equal(getattr(sim, field)[others], old[others], err_msg=field)
    np.testing.assert_array_equal(sim.qpos[chosen], np.tile(key.qpos, (3, 1)))
    np.testing.assert_array_equal(sim.qvel[chosen], np.tile(key.qvel, (3, 1)))
    np.testing.assert_array_equal(sim.ctrl[chosen], np.tile(key.ctrl, (3, 1)))
    assert np.all(sim.time[chosen] == 0)
    # derived outputs of the reset envs describe the keyframe now, not their old state
    data = mujoco.MjData(chain_model)
    mujoco.mj_resetDataKeyframe(chain_model, data, key.id)
    mujoco.mj_forward(chain_model, data)
    for env in chosen:
        np.testing.assert_allclose(sim.xpos[env], data.xpos, atol=1e-12)


def test_reset_to_given_states_with_mask_and_unsorted_ids(chain_model: mujoco.MjModel) -> None:
    sim = BatchedSim(chain_model, 6, substeps=2, default_keyframe="home")
    _advance(sim, 5)
    ids = np.array([4, 0, 2])  # unsorted: rows must stay paired with their ids
    qpos = np.array([[0.1, 0.2, 0.3, 0.4], [-0.1, -0.2, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]])
    qvel = np.array([[1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 3.0, 0]])
    untouched = sim.qpos[[1, 3, 5]].copy()
    sim.reset(ids, qpos=qpos, qvel=qvel)
    np.testing.assert_array_equal(sim.qpos[ids], qpos)
    np.testing.assert_array_equal(sim.qvel[ids], qvel)
    np.testing.assert_array_equal(sim.qpos[[1, 3, 5]], untouched)
    data = mujoco.MjData(chain_model)
    data.qpos[:] = qpos[0]
    mujoco.mj_forward(chain_model, data)
    np.testing.assert_allclose(sim.site_xpos[4], data.site_xpos, atol=1e-12)
    # boolean mask, and one qpos row broadcast to all chosen envs
    mask = np.zeros(6, dtype=bool)
    mask[[3, 5]] = True
    sim.reset(mask, qpos=np.full(4, 0.25))
    np.testing.assert_array_equal(sim.qpos[[3, 5]], np.full((2, 4), 0.25))
    np.testing.assert_array_equal(sim.qvel[[3, 5]], 0.0)


def test_snapshot_restore_replays_bit_for_bit(free_model_movable_com: mujoco.MjModel) -> None:
    free_model = free_model_movable_com
    dr = DomainRandomization(
        friction_scale=(0.5, 1.5), mass_scale=(0.8, 1.2), com_offset=(-0.01, 0.01)
    )
    sim = BatchedSim(free_model, 6, substeps=4, seed=11, randomization=dr)
    _advance(sim, 10)
    snap = sim.snapshot()

    def continue_run() -> dict[str, np.ndarray]:
        _advance(sim, 10, seed=5)
        sim.reset(
            [2, 3],
            qpos=np.tile(free_model.qpos0, (2, 1)) + sim.rng.normal(0, 0.01, (2, free_model.nq)),
        )
        _advance(sim, 10, seed=6)
        return _copies(sim) | {"friction": sim.batch.expanded("geom_friction").copy()}

    first = continue_run()
    sim.restore(snap)
    second = continue_run()
    for field in first:
        np.testing.assert_array_equal(first[field], second[field], err_msg=field)


def _trajectory(model: mujoco.MjModel, seed: int) -> np.ndarray:
    dr = DomainRandomization(
        friction_scale=(0.3, 1.2), mass_scale=(0.7, 1.3), actuator_gain_scale=(0.5, 1.5)
    )
    sim = BatchedSim(model, 8, substeps=4, seed=seed, randomization=dr)
    out = []
    for t in range(30):
        sim.step(sim.rng.uniform(-2, 2, size=sim.ctrl.shape))
        if t % 10 == 9:  # resets sample from sim.rng and re-randomize
            ids = np.flatnonzero(sim.rng.random(8) < 0.5)
            noise = sim.rng.normal(0, 0.05, size=(ids.size, model.nq))
            sim.reset(ids, qpos=model.qpos0 + noise)
        out.append(sim.qpos.copy())
    return np.stack(out)


def test_same_seed_same_trajectory_other_seed_differs(free_model: mujoco.MjModel) -> None:
    a, b, c = (_trajectory(free_model, s) for s in (1, 1, 2))
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3


def test_bad_inputs_raise_clear_errors(
    chain_model: mujoco.MjModel, free_model: mujoco.MjModel
) -> None:
    sim = BatchedSim(chain_model, 4)
    with pytest.raises(ValueError, match=r"ctrl must have shape \(num_envs, nu\) = \(4, 4\)"):
        sim.step(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="ctrl must have shape"):
        sim.step(np.zeros(4))
    with pytest.raises(IndexError, match=r"env id 4 is out of range: valid ids are 0\.\.3"):
        sim.reset([0, 4])
    with pytest.raises(IndexError, match="out of range"):
        sim.reset([-1])
    with pytest.raises(ValueError, match="unique"):
        sim.reset([1, 1])
    with pytest.raises(ValueError, match=r"mask must have shape \(4,\)"):
        sim.reset(np.ones(3, dtype=bool))
    with pytest.raises(TypeError, match="integers"):
        sim.reset([0.5])
    with pytest.raises(
        KeyError, match=r"unknown keyframe 'crouch'; the model has \['home', 'bent'\]"
    ):
        sim.reset([0], keyframe="crouch")
    with pytest.raises(IndexError, match="keyframe 5 is out of range"):
        sim.reset([0], keyframe=5)
    with pytest.raises(KeyError, match="unknown keyframe"):
        BatchedSim(chain_model, 2, default_keyframe="nope")
    with pytest.raises(ValueError, match=r"qpos must have shape \(2, 4\)"):
        sim.reset([0, 1], qpos=np.zeros((3, 4)))
    with pytest.raises(ValueError, match="non-finite"):
        sim.reset([0], qvel=np.array([np.nan, 0, 0, 0]))
    with pytest.raises(ValueError, match="num_envs must be an integer >= 1"):
        BatchedSim(chain_model, 0)
    with pytest.raises(ValueError, match="substeps must be an integer >= 1"):
        BatchedSim(chain_model, 2, substeps=0)
    with pytest.raises(KeyError, match="unknown sensor 'gyro'"):
        sim.sensor("gyro")
    with pytest.raises(ValueError, match="no free joint"):
        sim.apply_push([0], [1.0, 0, 0])
    free = BatchedSim(free_model, 2)
    with pytest.raises(ValueError, match=r"velocity must have shape"):
        free.apply_push([0, 1], np.zeros((3, 3)))
    with pytest.raises(KeyError, match="unknown body 'torso'"):
        free.ray_heights(np.zeros((1, 3)), "torso")
    # nothing above changed the state
    assert np.all(np.isfinite(sim.qpos))
