"""Per-env state: BatchedSim.env_snapshot/restore_env and Task.save_env/restore_env continue a
saved env bit for bit in another env slot, in a fresh task through an .npz, with domain
randomization, with a tabletop task's render looks; states that do not fit are refused before
anything is written."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mujoco
import numpy as np
import pytest

from unilab.config import compose
from unilab.sim import BatchedSim, DomainRandomization, EnvSnapshot
from unilab.tasks.base import Task
from unilab.tasks.env_state import EnvState
from unilab.tasks.registry import make_task

TASKS = ("arm_reach", "arm_lift_cube")  # free-space reaching; contact-rich grasping
# Masses need set_const; gains and friction change the dynamics without it.
DR = DomainRandomization(
    friction_scale=(0.5, 1.5), mass_scale=(0.7, 1.3), actuator_gain_scale=(0.6, 1.4)
)
N, SAVED, TARGET = 4, 2, 0
SAVE_AT, REPLAY = 8, 25  # steps; both episodes (300 steps) stay far from their time limit


def _make(name: str, seed: int, randomization: DomainRandomization | None = None) -> Task:
    cfg = compose([f"task={name}"]).task
    assert cfg.obs_noise == 0.0  # noise would come from the shared stream, not the env state
    if randomization is not None:
        cfg = dataclasses.replace(cfg, randomization=randomization)
    task = make_task(cfg, num_envs=N, seed=seed)
    task.reset()
    return task


def _actions(task: Task, steps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (steps, N, task.action_dim)).astype(np.float32)


def _run(task: Task, actions: np.ndarray, env: int) -> dict[str, np.ndarray]:
    """Step through actions; env's observations, rewards and ends, stacked over steps."""
    out: dict[str, list[np.ndarray]] = {"obs": [], "reward": [], "terminated": [], "truncated": []}
    for a in actions:
        res = task.step(a)
        out["obs"].append(res.obs["policy"][env].copy())
        out["reward"].append(res.reward[env])
        out["terminated"].append(res.terminated[env])
        out["truncated"].append(res.truncated[env])
    return {k: np.stack(v) for k, v in out.items()}


def _assert_same(expected: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> None:
    assert not expected["terminated"].any() and not expected["truncated"].any()
    for key in expected:
        assert np.array_equal(expected[key], got[key]), key


def _saved_run(task: Task) -> tuple[EnvState, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Run SAVE_AT steps, save env SAVED, run REPLAY more: (state, its obs row, the replay
    actions of env SAVED, env SAVED's record of the replay)."""
    warmup = _actions(task, SAVE_AT, seed=1)
    obs = None
    for a in warmup:
        obs = task.step(a).obs["policy"]
    assert obs is not None
    state = task.save_env(SAVED)
    replay = _actions(task, REPLAY, seed=2)
    return state, obs[SAVED].copy(), replay[:, SAVED].copy(), _run(task, replay, SAVED)


def _replay_in(task: Task, env_actions: np.ndarray) -> dict[str, np.ndarray]:
    """Replay env_actions in env TARGET while the other envs get different actions."""
    actions = _actions(task, REPLAY, seed=3)
    actions[:, TARGET] = env_actions
    return _run(task, actions, TARGET)


@pytest.mark.parametrize("name", TASKS)
def test_restored_env_continues_bit_identically(name: str, tmp_path: Path) -> None:
    task = _make(name, seed=3)
    state, saved_obs, env_actions, expected = _saved_run(task)

    # Into another env slot of the same task, which has moved on since.
    before = task.observe()["policy"]
    assert not np.array_equal(before[TARGET], saved_obs)
    obs = task.restore_env(TARGET, state)["policy"]
    assert np.array_equal(obs[TARGET], saved_obs)
    others = np.arange(N) != TARGET
    assert np.array_equal(obs[others], before[others])
    _assert_same(expected, _replay_in(task, env_actions))

    # Into a fresh task (another seed) through an .npz of plain arrays, in one call each way.
    path = state.save(tmp_path / "state.npz")
    loaded = EnvState.load(path)
    fresh = _make(name, seed=11)
    obs = fresh.restore_env(TARGET, loaded)["policy"]
    assert np.array_equal(obs[TARGET], saved_obs)
    _assert_same(expected, _replay_in(fresh, env_actions))


def test_restore_with_randomization_keeps_the_env_model(tmp_path: Path) -> None:
    task = _make("arm_lift_cube", seed=5, randomization=DR)
    fields = task.sim.randomizer.fields if task.sim.randomizer else {}
    assert set(fields) == {
        "geom_friction",
        "body_mass",
        "body_inertia",
        "actuator_gainprm",
        "actuator_biasprm",
    }
    state, _, env_actions, expected = _saved_run(task)
    subtree = task.sim.batch.expanded("body_subtreemass")  # derived by set_const
    assert subtree is not None
    saved_subtree = subtree[SAVED].copy()

    path = tmp_path / "state.npz"
    np.savez(path, **state.to_arrays())
    with np.load(path, allow_pickle=False) as stored:
        loaded = EnvState.from_arrays(stored)
    fresh = _make("arm_lift_cube", seed=12, randomization=DR)
    assert fresh.sim.randomizer is not None
    fresh_fields = fresh.sim.randomizer.fields
    for field, values in state.sim.model_fields.items():
        assert not np.array_equal(fresh_fields[field][TARGET], values), field
    untouched = {f: v[1].copy() for f, v in fresh_fields.items()}
    fresh.restore_env(TARGET, loaded)
    for field, values in state.sim.model_fields.items():
        assert np.array_equal(fresh_fields[field][TARGET], values), field
        assert np.array_equal(fresh_fields[field][1], untouched[field]), field
    fresh_subtree = fresh.sim.batch.expanded("body_subtreemass")
    assert fresh_subtree is not None
    assert np.array_equal(fresh_subtree[TARGET], saved_subtree)
    _assert_same(expected, _replay_in(fresh, env_actions))


def test_sim_env_snapshot_with_com_offsets(free_model_movable_com: mujoco.MjModel) -> None:
    dr = DomainRandomization(
        friction_scale=(0.5, 1.5), mass_scale=(0.8, 1.2), com_offset=(-0.01, 0.01)
    )
    sim = BatchedSim(free_model_movable_com, 5, substeps=4, seed=7, randomization=dr)
    rng = np.random.default_rng(0)
    ctrl = rng.uniform(-1, 1, (30, *sim.ctrl.shape))
    for c in ctrl[:10]:
        sim.step(c)
    snap = sim.env_snapshot(1)
    expected = []
    for c in ctrl[10:]:
        sim.step(c)
        expected.append((sim.qpos[1].copy(), sim.sensordata[1].copy()))
    sim.restore_env(4, snap)
    assert sim.randomizer is not None
    for field, values in sim.randomizer.fields.items():
        assert np.array_equal(values[4], values[1]), field
    for c, (qpos, sensors) in zip(ctrl[10:], expected, strict=True):
        c = c.copy()
        c[4] = c[1]
        sim.step(c)
        assert np.array_equal(sim.qpos[4], qpos)
        assert np.array_equal(sim.sensordata[4], sensors)
    with pytest.raises(ValueError, match="read-only"):
        snap.state[0] = 1.0


def test_states_that_do_not_fit_are_refused() -> None:
    reach = _make("arm_reach", seed=0)
    lift = _make("arm_lift_cube", seed=0)
    state = reach.save_env(1)
    with pytest.raises(IndexError, match=r"env id 4 is out of range: valid ids are 0\.\.3"):
        reach.save_env(N)
    with pytest.raises(IndexError, match="env id -1 is out of range"):
        reach.restore_env(-1, state)
    with pytest.raises(TypeError, match="an env id must be an integer"):
        reach.save_env(True)
    with pytest.raises(TypeError, match="must be an EnvState"):
        reach.restore_env(0, state.sim)  # type: ignore[arg-type]

    lift_state_before = lift.sim.batch.state.copy()
    with pytest.raises(ValueError, match="of task 'arm_reach'; this task is 'arm_lift_cube'"):
        lift.restore_env(0, state)
    # Another model under the same name: the physics state width names the mismatch.
    cartpole = _make("cartpole_balance", seed=0)
    renamed = dataclasses.replace(cartpole.save_env(0), task="arm_reach", arrays=state.arrays)
    with pytest.raises(ValueError, match=r"state rows are \(\d+,\): it comes from a different"):
        reach.restore_env(0, renamed)
    arrays = state.to_arrays()
    arrays["task/target"] = np.zeros(2)
    with pytest.raises(ValueError, match=r"'target' is float64 \(2,\); this task's rows are"):
        reach.restore_env(0, EnvState.from_arrays(arrays))
    del arrays["task/target"]
    with pytest.raises(ValueError, match=r"lacks \['target'\]"):
        reach.restore_env(0, EnvState.from_arrays(arrays))
    with pytest.raises(ValueError, match="not an env state: no sim/state"):
        EnvState.from_arrays({k: v for k, v in state.to_arrays().items() if k != "sim/state"})
    assert np.array_equal(lift.sim.batch.state, lift_state_before)

    randomized = _make("arm_reach", seed=0, randomization=DR)
    with pytest.raises(ValueError, match="this sim randomizes \\[\\]"):
        reach.restore_env(0, randomized.save_env(0))
    with pytest.raises(ValueError, match="env snapshot holds randomized model fields \\[\\]"):
        randomized.restore_env(0, state)
    bad = EnvSnapshot(state=state.sim.state[:-1], model_fields={})
    with pytest.raises(ValueError, match="different model"):
        reach.sim.restore_env(0, bad)


def test_tabletop_restore_pushes_the_env_looks() -> None:
    # Colours, lights and camera poses are task rows the renderer must be given again.
    cfg = compose(["task=arm_pick_place", "task.image_size=16"]).task
    task = make_task(cfg, num_envs=3, seed=1)
    task.reset()
    actions = np.random.default_rng(0).uniform(-1, 1, (20, 3, task.action_dim))
    for a in actions[:5]:
        task.step(a.astype(np.float32))
    state = task.save_env(2)
    expected = [{k: v[2].copy() for k, v in task.step(a).obs.items()} for a in actions[5:]]
    task.close()
    fresh = make_task(cfg, num_envs=3, seed=9)
    fresh.reset()
    # The same slot: a tile's pixels depend on where it sits in the shared framebuffer, so
    # images are bit-identical only there (vector groups are in any slot).
    fresh.restore_env(2, state)
    for a, want in zip(actions[5:], expected, strict=True):
        got = fresh.step(a.astype(np.float32)).obs
        assert set(got) >= {"policy", "images/front", "images/wrist"}
        for group, values in want.items():
            assert np.array_equal(got[group][2], values), group
    fresh.close()


def test_a_restored_env_keeps_its_reset_bin() -> None:
    from unilab.tasks.arm_reach import ArmReachConfig
    from unilab.tasks.registry import make_task

    task = make_task(ArmReachConfig(target_bins=[2, 1, 2]), num_envs=4, seed=1)
    task.reset()
    task.episode_bin[:] = [0, 1, 2, 3]
    saved = task.save_env(3)
    assert "episode_bin" in saved.arrays
    task.restore_env(0, saved)
    assert task.episode_bin.tolist() == [3, 1, 2, 3]
