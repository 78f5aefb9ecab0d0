"""Unstable physics: detected, reset inside step, reported and counted; nothing non-finite leaks."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from unilab.sim import BatchedSim, StabilityLimits, UnstableReason
from unilab.sim.stability import find_unstable

BOUND_FIELDS = (
    "time", "qpos", "qvel", "ctrl", "act", "xfrc_applied", "qacc", "sensordata",
    "xpos", "xquat", "site_xpos", "site_xmat", "cvel",
)  # fmt: skip


def _all_finite(sim: BatchedSim) -> bool:
    return all(np.isfinite(getattr(sim, f)).all() for f in BOUND_FIELDS)


def test_one_thousand_injected_faults_are_all_caught(free_model: mujoco.MjModel) -> None:
    num_envs, per_step, steps = 40, 4, 250
    sim = BatchedSim(free_model, num_envs, substeps=2, seed=1, default_keyframe="high")
    key = free_model.key("high")
    rng = np.random.default_rng(123)
    kinds_seen: set[tuple[str, float]] = set()
    faults = 0
    for _ in range(steps):
        ctrl = rng.uniform(-1, 1, size=(num_envs, free_model.nu))
        faulted = rng.choice(num_envs, size=per_step, replace=False)
        for env in faulted:
            field = ("qvel", "ctrl")[rng.integers(2)]
            value = (np.nan, 1e12)[rng.integers(2)]
            kinds_seen.add((field, value if np.isfinite(value) else -1.0))
            if field == "qvel":
                sim.qvel[env, rng.integers(free_model.nv)] = value
            else:  # ctrl 1 has a ctrlrange, so 1e12 there is clamped without a MuJoCo warning
                ctrl[env, rng.integers(free_model.nu)] = value
        faults += per_step
        count_before = sim.unstable_count
        status = sim.step(ctrl)
        expected = np.zeros(num_envs, dtype=bool)
        expected[faulted] = True
        np.testing.assert_array_equal(status.unstable, expected)
        assert np.all(status.reasons[faulted] != 0) and np.all(status.reasons[~expected] == 0)
        assert sim.unstable_count == count_before + per_step
        np.testing.assert_array_equal(sim.qpos[faulted], np.tile(key.qpos, (per_step, 1)))
        np.testing.assert_array_equal(sim.qvel[faulted], 0.0)
        np.testing.assert_array_equal(sim.ctrl[faulted], 0.0)
        assert _all_finite(sim)
    assert faults == 1000 and sim.unstable_count == 1000
    assert len(kinds_seen) == 4
    # after all that, the sim still steps cleanly
    assert sim.step(np.zeros((num_envs, free_model.nu))).num_unstable == 0


def test_simulation_error_envs_are_reset_and_reported(free_model: mujoco.MjModel) -> None:
    sim = BatchedSim(free_model, 6, substeps=2)
    sim.step()
    eq_type = sim.batch.expand("eq_type")
    eq_type[[1, 4]] = 99  # an unknown constraint type: mj_step raises once the weld is active
    eq_active = sim.bind("eq_active")
    eq_active[[1, 2, 4]] = 1.0
    time_before = sim.time.copy()
    status = sim.step()
    np.testing.assert_array_equal(np.flatnonzero(status.unstable), [1, 4])
    assert np.all(status.reasons[[1, 4]] & UnstableReason.ERROR)
    assert "unknown constraint type" in sim.last_error
    assert sim.unstable_count == 2
    np.testing.assert_array_equal(eq_active[[1, 4], 0], 0.0)  # reset to the model's defaults
    assert eq_active[2, 0] == 1.0 and sim.time[2] > time_before[2]  # env 2 ran, welded
    assert _all_finite(sim)
    assert sim.step().num_unstable == 0
    # an env whose reset itself fails is a broken model, not a state: say so
    sim.batch.expand("eq_active0")[4] = 1
    eq_active[4] = 1.0
    with pytest.raises(RuntimeError, match=r"MuJoCo failed while resetting envs \[4\]"):
        sim.step()


def test_state_beyond_limits_is_reset_without_any_mujoco_warning(
    free_model: mujoco.MjModel,
) -> None:
    limits = StabilityLimits(max_abs_qvel=1e3, max_abs_qpos=50.0)
    sim = BatchedSim(free_model, 4, substeps=2, limits=limits)
    ball = free_model.joint("ball_free").dofadr[0]
    sim.qvel[1, ball] = 2e3  # fast but far below MuJoCo's own 1e10 bound
    ball_z = free_model.joint("ball_free").qposadr[0] + 2
    sim.qpos[3, ball_z] = 80.0
    status = sim.step()
    np.testing.assert_array_equal(np.flatnonzero(status.unstable), [1, 3])
    np.testing.assert_array_equal(status.reasons[[1, 3]], [UnstableReason.STATE] * 2)
    np.testing.assert_array_equal(sim.qpos[[1, 3]], np.tile(free_model.qpos0, (2, 1)))


def test_find_unstable_on_synthetic_arrays() -> None:
    n = 6
    limits = StabilityLimits(max_abs_qpos=10, max_abs_qvel=10, max_abs_qacc=100, max_abs_ctrl=5)
    counts = np.zeros((n, mujoco.mjtWarning.mjNWARNING), dtype=np.int32)
    previous = counts.copy()
    qpos, qvel, qacc, ctrl = np.zeros((n, 3)), np.zeros((n, 2)), np.zeros((n, 2)), np.zeros((n, 1))
    act, sensors = np.zeros((n, 0)), np.zeros((n, 2))
    counts[0, mujoco.mjtWarning.mjWARN_BADQACC] = 1
    qpos[1, 2] = np.nan
    qacc[2, 0] = -1e3
    ctrl[3, 0] = 6.0
    sensors[4, 1] = np.inf
    reasons = find_unstable(counts, previous, qpos, qvel, qacc, ctrl, (act, sensors), limits)
    assert reasons.tolist() == [1, 2, 2, 2, 2, 0]
    # a counter that went down (MuJoCo's autoreset zeroes counters before incrementing) counts too
    previous[5, mujoco.mjtWarning.mjWARN_BADQVEL] = 3
    counts[5, mujoco.mjtWarning.mjWARN_BADQVEL] = 1
    assert find_unstable(counts, previous, qpos, qvel, qacc, ctrl, (), limits)[5] == 1
    only_qvel = StabilityLimits(warnings=("BADQVEL",))
    assert find_unstable(counts, previous, qpos, qvel, qacc, ctrl, (), only_qvel)[0] == 0
    with pytest.raises(ValueError, match="unknown MuJoCo warnings"):
        StabilityLimits(warnings=("BADQVELL",))
    with pytest.raises(ValueError, match="max_abs_qvel must be > 0"):
        StabilityLimits(max_abs_qvel=0)
