"""Locomotion tasks on the real robot models: shapes and finite values, terminations and
time-outs, command resampling, the rough terrain, its curriculum and height scan."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from unilab.config import ConfigError, compose
from unilab.tasks import make_task
from unilab.tasks.locomotion_terms import (
    LocomotionTask,
    gravity_in_frame,
    yaw_quat,
)
from unilab.tasks.quadruped_joystick import QuadrupedJoystickRough
from unilab.tasks.terrain import Terrain, TerrainConfig

TASK_NAMES = ("quadruped_joystick_flat", "quadruped_joystick_rough", "humanoid_walk")


def make(name: str, num_envs: int = 8, *overrides: str) -> LocomotionTask:
    cfg = compose([f"task={name}", *overrides])
    task = make_task(cfg.task, num_envs=num_envs, seed=3)
    assert isinstance(task, LocomotionTask)
    task.reset()
    return task


def set_base(task: LocomotionTask, ids: np.ndarray, xy: np.ndarray, yaw: float = 0.0) -> None:
    """Put the bases of ids at xy (standing height above the terrain), heading yaw, at rest."""
    qpos = np.array(task.sim.qpos[ids])
    qpos[:, :2] = xy
    qpos[:, 2] = task.terrain_height(xy) + task._key_qpos[2]
    qpos[:, 3:7] = yaw_quat(np.full(len(ids), yaw))
    task.sim.reset(ids, qpos=qpos, qvel=np.zeros(task.model.nv))


@pytest.mark.parametrize("name", TASK_NAMES)
def test_random_actions_give_right_shapes_and_finite_values(name: str) -> None:
    task = make(name, 8)
    dims = task.obs_dims
    assert dims["critic"] > dims["policy"]
    rng = np.random.default_rng(0)
    for _ in range(100):
        result = task.step(rng.normal(0.0, 1.0, (8, task.action_dim)).astype(np.float32))
        for group, obs in (*result.obs.items(), *result.final_obs.items()):
            assert obs.shape == (8, dims[group]) and obs.dtype == np.float32
            assert np.isfinite(obs).all(), group
        assert set(result.reward_terms) == set(task.reward_weights)
        for term, value in result.reward_terms.items():
            assert value.shape == (8,) and np.isfinite(value).all(), term
        assert np.isfinite(result.reward).all()
        for metric, value in result.extras.items():
            assert value.shape == (8,) and np.isfinite(value).all(), metric
    assert task.sim.unstable_count == 0


@pytest.mark.parametrize("name", TASK_NAMES)
def test_upside_down_base_terminates_with_its_reason(name: str) -> None:
    task = make(name, 4, "task.standing_fraction=1.0")
    qpos = np.array(task.sim.qpos[[1]])
    qpos[0, 2] += 0.2
    qpos[0, 3:7] = [0.0, 1.0, 0.0, 0.0]  # half a turn about x: upside down
    task.sim.reset([1], qpos=qpos)
    assert task.terminations()["bad_orientation"].tolist() == [False, True, False, False]
    result = task.step(np.zeros((4, task.action_dim), np.float32))
    assert result.terminated[1] and result.reasons["bad_orientation"][1]
    assert not result.terminated[[0, 2, 3]].any()
    assert not result.truncated.any()
    assert task.episode_step[1] == 0  # auto-reset
    assert task.projected_gravity()[1, 2] < -0.9  # upright again


def test_trunk_on_the_ground_terminates_as_base_contact() -> None:
    task = make("quadruped_joystick_flat", 2, "task.standing_fraction=1.0")
    qpos = np.array(task.sim.qpos[[0]])
    qpos[0, 2] = 0.05  # on its back, legs up: the trunk (half-height 0.057) lies on the floor
    qpos[0, 3:7] = [0.0, 1.0, 0.0, 0.0]
    task.sim.reset([0], qpos=qpos)
    task.sim.step(task.action_to_ctrl(np.zeros((2, 12), np.float32)))  # contacts fill in a step
    reasons = task.terminations()
    assert reasons["base_contact"].tolist() == [True, False]
    assert reasons["base_too_low"].tolist() == [True, False]


def test_time_outs_are_truncations_not_terminations() -> None:
    task = make(
        "quadruped_joystick_flat", 4, "task.episode_length_s=0.2", "task.standing_fraction=1.0"
    )
    zeros = np.zeros((4, 12), np.float32)
    for _ in range(9):
        result = task.step(zeros)
        assert not result.truncated.any() and not result.terminated.any()
    result = task.step(zeros)
    assert result.truncated.all() and not result.terminated.any()
    assert result.reasons["time_out"].all()
    assert (result.episode_length == 10).all()
    assert (task.episode_step == 0).all()


def test_commands_resample_only_for_chosen_envs_within_ranges() -> None:
    task = make(
        "quadruped_joystick_flat",
        64,
        "task.lin_vel_x=[0.2,0.9]",
        "task.lin_vel_y=[-0.3,-0.1]",
        "task.ang_vel_yaw=[0.5,0.6]",
        "task.standing_fraction=0.0",
        "task.command_resample_s=0.1",
    )
    cmd = task.commands
    assert (cmd[:, 0] >= 0.2).all() and (cmd[:, 0] <= 0.9).all()
    assert (cmd[:, 1] >= -0.3).all() and (cmd[:, 1] <= -0.1).all()
    assert (cmd[:, 2] >= 0.5).all() and (cmd[:, 2] <= 0.6).all()
    before = cmd.copy()
    task.resample_commands(np.array([3, 7]))
    changed = np.flatnonzero((task.commands != before).any(axis=1))
    assert changed.tolist() == [3, 7]

    # In-episode resampling: only envs whose episode clock hits the period (5 steps).
    before = task.commands.copy()
    task.episode_step[:] = 1
    task.episode_step[[10, 20]] = 5
    task.step(np.zeros((64, 12), np.float32))
    changed = np.flatnonzero((task.commands != before).any(axis=1))
    assert changed.tolist() == [10, 20]

    task.cfg.standing_fraction = 1.0
    task.resample_commands(np.arange(64))
    assert (task.commands == 0).all()


@pytest.mark.parametrize("name", TASK_NAMES)
def test_standing_pays_more_tracking_for_a_zero_command(name: str) -> None:
    task = make(name, 2, "task.init_joint_noise=0.0", "task.init_base_vel=0.0")
    for _ in range(5):
        task.step(np.zeros((2, task.action_dim), np.float32))
    task.commands[:] = 0.0
    still = task.reward_tracking_lin_vel()
    task.commands[:, 0] = 1.0
    moving = task.reward_tracking_lin_vel()
    assert (still > 0.9).all()
    assert (still > moving + 0.5).all()


def test_terrain_difficulty_rises_with_level() -> None:
    cfg = TerrainConfig(num_levels=5, tile_size=4.0, border=1.0)
    terrain = Terrain(cfg)
    n = terrain.tile_samples

    def tile(level: int, kind: str) -> np.ndarray:
        r0 = terrain.border_samples + cfg.kinds.index(kind) * n
        c0 = terrain.border_samples + level * n
        return terrain.heights[r0 : r0 + n, c0 : c0 + n]

    for kind in cfg.kinds:
        spans = [float(np.ptp(tile(level, kind))) for level in range(cfg.num_levels)]
        assert spans[0] <= 2 * cfg.rough_min + 2 * cfg.step_min + 1e-9, (kind, spans)
        assert spans[-1] > 0.1, (kind, spans)
        assert spans[-1] > spans[0]
    top = tile(cfg.num_levels - 1, "slope_up")
    assert top[n // 2, n // 2] < top[0, 0] - 0.3  # a pit: walking out goes up
    assert np.abs(terrain.heights[: terrain.border_samples]).max() == 0.0  # flat border
    with pytest.raises(ConfigError, match=r"terrain\.kinds"):
        TerrainConfig(kinds=["lava"])


def _rough(num_envs: int, *overrides: str) -> QuadrupedJoystickRough:
    task = make(
        "quadruped_joystick_rough",
        num_envs,
        "task.terrain.num_levels=4",
        "task.terrain.tile_size=4.0",
        "task.terrain.border=1.0",
        "task.level_up_distance=2.0",
        "task.standing_fraction=1.0",
        *overrides,
    )
    assert isinstance(task, QuadrupedJoystickRough)
    return task


def test_height_field_matches_the_terrain_grid_and_spawns_envs_on_their_tiles() -> None:
    task = _rough(6)
    terrain = task.terrain
    assert task.model.nhfield == 1 and mujoco_geom_count(task, "floor") == 0
    # Envs stand on their own tile's platform.
    centers = terrain.tile_centers(task.terrain_levels, task.terrain_kinds)
    assert np.abs(task.base_pos()[:, :2] - centers).max() <= task.cfg.spawn_spread + 0.05
    assert (np.abs(task.base_height() - 0.322 - task.cfg.spawn_clearance) < 0.06).all()
    # MuJoCo's height field is where the numpy grid says, across the whole map.
    rng = np.random.default_rng(1)
    span = np.array(terrain.heights.shape[::-1]) * terrain.resolution
    pts = rng.uniform(0.0, 1.0, (200, 2)) * span
    origins = np.concatenate([pts, np.full((200, 1), 5.0)], axis=1)
    dist, _ = task.sim.batch.ray(origins, np.array([0.0, 0.0, -1.0]), geomgroup=[1, 0, 0, 0, 0, 0])
    mj_height = 5.0 - dist[0]
    # Bilinear (numpy) and triangulated (MuJoCo) interpolation differ only on step edges.
    close = np.abs(mj_height - terrain.height_at(pts)) < 0.01
    assert close.mean() > 0.9


def mujoco_geom_count(task: LocomotionTask, name: str) -> int:
    import mujoco

    return int(mujoco.mj_name2id(task.model, mujoco.mjtObj.mjOBJ_GEOM, name) >= 0)


def test_curriculum_moves_levels_up_after_a_long_walk_and_down_after_a_fall() -> None:
    task = _rough(4)
    top = task.terrain.num_levels - 1
    task.terrain_levels[:] = [1, 1, 0, top]
    task.terrain_kinds[:] = [0, 1, 2, 3]
    origins = task.terrain.tile_centers(task.terrain_levels, task.terrain_kinds)
    task.env_origins[:] = origins
    # env 0 walked 3 m and timed out; env 1 fell at its spawn point; env 2 fell on level 0;
    # env 3 mastered the top level.
    set_base(task, np.arange(4), origins + np.array([[3.0, 0], [0, 0], [0, 0], [0, 3.0]]))
    task.episode_step[:] = [task.max_episode_steps, 20, 20, task.max_episode_steps]
    assert task.task_metrics()["terrain_top"].tolist() == [0, 0, 0, 1]
    task.reset_envs(np.arange(4))
    assert task.terrain_levels[:3].tolist() == [2, 0, 0]
    assert 0 <= task.terrain_levels[3] <= top
    # Mastering the top level is counted: the mean level alone cannot show it.
    assert task.task_metrics()["terrain_graduations"].tolist() == [0, 0, 0, 1]
    # A timed-out env that walked too little for its command goes down; one told to stand stays.
    task.terrain_levels[:] = 2
    origins = task.terrain.tile_centers(task.terrain_levels, task.terrain_kinds)
    task.env_origins[:] = origins
    set_base(task, np.arange(4), origins + 0.3)
    task.commands[:] = [[1.0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    task.episode_step[:] = task.max_episode_steps
    task.reset_envs(np.arange(4))
    assert task.terrain_levels.tolist() == [1, 2, 2, 2]
    # Each reset respawns on the tile of the new level.
    centers = task.terrain.tile_centers(task.terrain_levels, task.terrain_kinds)
    assert np.abs(task.base_pos()[:, :2] - centers).max() <= task.cfg.spawn_spread + 0.05


def test_curriculum_off_keeps_levels() -> None:
    task = _rough(2, "task.curriculum=false")
    levels = task.terrain_levels.copy()
    task.episode_step[:] = 5
    task.reset_envs(np.arange(2))
    assert (task.terrain_levels == levels).all()


def test_start_levels_can_be_forced_to_the_hardest_for_evaluation() -> None:
    # What bench/learn_locomotion.py does to measure tracking on the top level.
    pin = ("task.min_init_level=3", "task.max_init_level=3", "task.curriculum=false")
    task = _rough(6, *pin)
    assert task.terrain_levels.tolist() == [3] * 6
    centers = task.terrain.tile_centers(task.terrain_levels, task.terrain_kinds)
    assert np.abs(task.base_pos()[:, :2] - centers).max() <= task.cfg.spawn_spread + 0.05
    task.episode_step[:] = 5  # a fall (before the time limit) would move levels down
    task.reset_envs(np.arange(6))
    assert task.terrain_levels.tolist() == [3] * 6
    with pytest.raises(ConfigError, match="min_init_level"):
        _rough(2, "task.min_init_level=3", "task.max_init_level=2")


def test_height_scan_has_its_shape_and_sees_the_terrain() -> None:
    task = _rough(2)
    k = len(task.cfg.scan_x) * len(task.cfg.scan_y)
    assert task.height_scan().shape == (2, k)
    assert task.obs_dims["critic"] == task.obs_dims["policy"] + 3 + 4 + 4 + k
    kinds = list(task.cfg.terrain.kinds)
    top = task.terrain.num_levels - 1
    stairs = task.terrain.tile_centers(np.array([top, 0]), np.array([kinds.index("stairs_up"), 0]))
    # env 0 stands 1.8 m out from the stair pyramid's centre, facing along +x; env 1 on the
    # flat border.
    xy = np.array([stairs[0] + [1.8, 0.0], [0.9, 0.5]])
    set_base(task, np.arange(2), xy, yaw=0.0)
    scan = task.height_scan()
    assert np.ptp(scan[1]) < 1e-6 and abs(scan[1, 0] - (0.322 - 0.28)) < 1e-6
    assert np.ptp(scan[0]) > task.cfg.terrain.step_max  # sees several steps
    # Each scan value is the base height above the terrain under that point, minus target.
    pts = xy[0] + task.scan_points[:, :2]
    expected = task.base_pos()[0, 2] - task.terrain.height_at(pts) - task.cfg.base_height_target
    assert np.mean(np.abs(scan[0] - expected) < 0.01) > 0.7
    # Turning the base turns the scan with it: facing -x the front points see the other way.
    set_base(task, np.arange(2), xy, yaw=math.pi)
    turned = task.height_scan()
    assert not np.allclose(turned[0], scan[0], atol=0.01)
    assert np.allclose(turned[0], scan[0][::-1], atol=0.02)


def test_rough_state_round_trip_replays_bit_exactly() -> None:
    task = _rough(4, "task.standing_fraction=0.2", "task.episode_length_s=0.3")
    rng = np.random.default_rng(0)
    actions = rng.normal(0.0, 1.0, (25, 4, 12)).astype(np.float32)
    for a in actions[:5]:
        task.step(a)
    state, snap = task.get_state(), task.sim.snapshot()
    first = [task.step(a) for a in actions[5:]]
    task.set_state(state)
    task.sim.restore(snap)
    second = [task.step(a) for a in actions[5:]]
    for a, b in zip(first, second, strict=True):
        assert np.array_equal(a.obs["critic"], b.obs["critic"])
        assert np.array_equal(a.reward, b.reward)
    assert "terrain_levels" in state and "commands" in state and "feet_air_time" in state


def test_humanoid_gait_clock_and_preset_configs() -> None:
    task = make("humanoid_walk", 2)
    assert task.obs_dims["policy"] == 3 + 3 + 3 + 19 * 3 + 2
    task.episode_step[:] = [0, 30]  # 0 s and 0.6 s into a 0.8 s cycle
    clock = task.observe()["policy"][:, -2:]
    assert np.allclose(clock, [[0.0, 1.0], [-1.0, 0.0]], atol=1e-6)
    task.commands[:] = [0.5, 0.0, 0.0]  # left foot down in the first 55 %, right offset by half
    assert task.expected_stance().tolist() == [[True, True], [False, True]]
    task.commands[:] = 0.0  # standing: both feet down
    assert task.expected_stance().all()
    for name in TASK_NAMES:
        cfg = compose([f"task={name}"])
        assert cfg.sim.num_envs % cfg.runtime.num_workers == 0
        assert cfg.runtime.chunk_len == 24
    with pytest.raises(ConfigError, match="lin_vel_x"):
        compose(["task=quadruped_joystick_flat", "task.lin_vel_x=[1.0,-1.0]"])
    with pytest.raises(ValueError, match="unknown reward term"):
        make("quadruped_joystick_flat", 1, "task.reward_weights={nope: 1.0}")


def test_pushes_and_domain_randomization_reach_the_sim() -> None:
    task = make(
        "quadruped_joystick_flat",
        4,
        "task.push_interval_s=0.1",
        "task.push_velocity=1.0",
        "task.standing_fraction=1.0",
        "task.init_base_vel=0.0",
        "task.randomization.mass_add=[-1.0,2.0]",
        "task.randomization.mass_bodies=[trunk]",
    )
    assert task.sim.randomizer is not None
    trunk_mass = task.sim.randomizer.fields["body_mass"][:, task._base_body]
    assert np.unique(trunk_mass).size == 4
    zeros = np.zeros((4, 12), np.float32)
    for _ in range(5):  # the push comes at the start of the 6th step (0.1 s)
        task.step(zeros)
    calm = np.linalg.norm(task.base_lin_vel()[:, :2], axis=1)
    task.step(zeros)
    pushed = np.linalg.norm(task.base_lin_vel()[:, :2], axis=1)
    assert calm.max() < 0.1
    assert pushed.mean() > 0.2


def test_gravity_in_frame_matches_the_general_rotation() -> None:
    quat = np.random.default_rng(0).normal(size=(64, 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    expected = np.empty((64, 3))
    for row, q in zip(expected, quat, strict=True):
        mat = np.empty(9)
        mujoco.mju_quat2Mat(mat, q)
        row[:] = mat.reshape(3, 3).T @ [0.0, 0.0, -1.0]  # MuJoCo's own rotation as reference
    np.testing.assert_allclose(gravity_in_frame(quat), expected, rtol=0, atol=1e-12)


def test_derived_quantities_follow_every_change_of_the_sim_state() -> None:
    """The per-state cache must never serve a quantity of an older state."""
    task = make("quadruped_joystick_flat", 2, "task.standing_fraction=1.0")
    sim = task.sim
    upright = task.projected_gravity().copy()
    snap = sim.env_snapshot(0)
    version = sim.state_version
    qpos = np.array(sim.qpos[[0]])
    qpos[0, 3:7] = [0.0, 1.0, 0.0, 0.0]  # upside down
    sim.reset([0], qpos=qpos)
    assert sim.state_version > version
    assert task.projected_gravity()[0, 2] > 0.9 and task.terminations()["bad_orientation"][0]
    sim.restore_env(0, snap)
    np.testing.assert_allclose(task.projected_gravity(), upright, atol=1e-12)
    assert not task.terminations()["bad_orientation"][0]
    before = task.joint_vel().copy()
    task.step(np.full((2, task.action_dim), 2.0, np.float32))
    assert not np.array_equal(task.joint_vel(), before)
    version = sim.state_version
    sim.apply_push([1], [1.0, 0.0, 0.0])
    assert sim.state_version == version + 1
    # Callers may add reasons to the dict terminations() returns; the cache keeps its own.
    task.terminations()["extra"] = np.ones(2, bool)
    assert "extra" not in task.terminations()


def test_level_bins_start_each_episode_on_the_level_the_allocation_drew() -> None:
    task = _rough(8, "task.level_bins=true", "task.curriculum=false")
    assert task.num_reset_bins == task.terrain.num_levels == 4
    task.bin_probs = np.array([0.0, 0.0, 1.0, 0.0], np.float32)
    task.reset()
    assert task.episode_bin.tolist() == [2] * 8 and task.terrain_levels.tolist() == [2] * 8
    centers = task.terrain.tile_centers(task.terrain_levels, task.terrain_kinds)
    assert np.abs(task.base_pos()[:, :2] - centers).max() <= task.cfg.spawn_spread + 0.05
    task.bin_probs = np.array([0.0, 0.0, 0.0, 1.0], np.float32)
    task._start_episodes(np.arange(3))  # an ended episode's restart: bin first, then reset
    assert task.terrain_levels.tolist() == [3, 3, 3, 2, 2, 2, 2, 2]
    assert _rough(2).num_reset_bins == 1  # the curriculum alone: no bins
    with pytest.raises(ConfigError, match=r"task\.curriculum=false"):
        _rough(2, "task.level_bins=true")


def test_command_bins_keep_every_command_of_an_episode_in_its_cell() -> None:
    task = make(
        "quadruped_joystick_flat",
        16,
        "task.command_bins=[2,1,1]",
        "task.lin_vel_x=[-1.0,1.0]",
        "task.standing_fraction=0.0",
        "task.command_resample_s=0.1",
    )
    assert task.num_reset_bins == 2
    task.bin_probs = np.array([0.0, 1.0], np.float32)  # the forward half: vx in [0, 1]
    task.reset()
    assert (task.episode_bin == 1).all() and (task.commands[:, 0] >= 0).all()
    for _ in range(12):  # mid-episode resamples stay in the cell
        task.step(np.zeros((16, task.action_dim), np.float32))
        assert (task.commands[:, 0] >= 0).all() and (task.commands[:, 0] <= 1.0).all()
    assert np.ptp(task.commands[:, 1]) > 0.2  # vy still spans its whole range
    with pytest.raises(ConfigError, match="command_bins"):
        make("quadruped_joystick_flat", 1, "task.command_bins=[2,0,1]")
    with pytest.raises(ConfigError, match="use one of them"):
        _rough(2, "task.level_bins=true", "task.curriculum=false", "task.command_bins=[2,1,1]")
