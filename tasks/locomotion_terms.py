"""Shared machinery of the locomotion tasks (legged_gym / MuJoCo Playground style).

`LocomotionTask` drives any floating-base robot with position servos: velocity commands
(vx, vy, yaw rate in the base frame) sampled at reset and resampled every few seconds,
base-frame kinematics from the IMU sensors, foot contacts and air time, the usual reward
terms, fall terminations, optional pushes. Subclasses name the robot, its contact geoms and
foot sites, and may add terrain (`edit_spec`, `terrain_height`, `spawn_xy`), curriculum
(`before_reset`) and extra observations (`extra_policy_obs`, `extra_critic_obs`).

Every quantity is computed for all envs at once from the sim's live views, once per sim
state (`unilab.sim.state_cache.per_sim_state`): observations, reward terms and
terminations ask for the same gravity, joint and contact arrays. The only per-step bookkeeping (foot air time)
updates lazily, once per step, when first asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import mujoco
import numpy as np

from unilab.config.errors import ConfigError
from unilab.config.schema import TaskConfig
from unilab.robots.validate import validate_spec
from unilab.sim.contacts import CONTACT_SENSOR_DIM, add_contact_sensors, contact_sensor_name
from unilab.sim.state_cache import per_sim_state
from unilab.tasks.base import StepResult, Task
from unilab.tasks.reset_bins import check_bins, grid_cell_box


def gravity_in_frame(quat: np.ndarray) -> np.ndarray:
    """R(q)^T (0, 0, -1) for unit quaternions (n, 4) (w, x, y, z): minus the third row of
    R(q), in a few whole-array operations (a general quaternion rotation takes ~20)."""
    w, x, y, z = quat[:, 0], quat[:, 1], quat[:, 2], quat[:, 3]
    out = np.empty((quat.shape[0], 3))
    np.subtract(w * y, x * z, out=out[:, 0])
    np.add(w * x, y * z, out=out[:, 1])
    np.add(x * x, y * y, out=out[:, 2])
    out *= (2.0, -2.0, 2.0)
    out[:, 2] -= 1.0
    return out


def sum_squares(values: np.ndarray) -> np.ndarray:
    """Row sums of squares of (n, k) values in one call (np.sum(np.square(.)) takes two)."""
    result: np.ndarray = np.einsum("ij,ij->i", values, values)
    return result


def yaw_quat(yaw: np.ndarray) -> np.ndarray:
    """(n, 4) quaternions of rotations by yaw (n,) about world z."""
    quat = np.zeros((yaw.shape[0], 4))
    quat[:, 0] = np.cos(yaw / 2)
    quat[:, 3] = np.sin(yaw / 2)
    return quat


def _check_range(name: str, value: tuple[float, float]) -> None:
    if len(value) != 2 or value[0] > value[1]:
        raise ConfigError(f"task.{name}={list(value)} must be a range [low, high] with low <= high")


@dataclass
class LocomotionConfig(TaskConfig):
    episode_length_s: float = 20.0
    lin_vel_x: tuple[float, float] = (-1.0, 1.0)
    """Range of the commanded forward velocity (m/s, base frame)."""
    lin_vel_y: tuple[float, float] = (-0.5, 0.5)
    """Range of the commanded sideways velocity (m/s, base frame)."""
    ang_vel_yaw: tuple[float, float] = (-1.0, 1.0)
    """Range of the commanded yaw rate (rad/s)."""
    standing_fraction: float = 0.1
    """Probability that a sampled command is zero (stand still)."""
    command_bins: tuple[int, int, int] = (1, 1, 1)
    """Reset bins: the (vx, vy, yaw rate) command box cut into this many cells per axis; all
    of an episode's commands are drawn in its bin's cell. (1, 1, 1): no bins."""
    command_resample_s: float = 5.0
    """Commands are resampled every this many seconds within an episode (and at reset)."""
    tracking_sigma: float = 0.25
    """Tracking rewards are exp(-squared error / tracking_sigma)."""
    base_height_target: float = 0.28
    """Base height above the terrain the base_height term pulls to (m)."""
    air_time_target: float = 0.3
    """feet_air_time pays (air time - this) at each touchdown (s)."""
    contact_force: float = 1.0
    """A foot whose touch sensor reads more than this (N) is in contact."""
    soft_limit_fraction: float = 0.9
    """dof_pos_limits penalizes joints outside this central fraction of their range."""
    max_tilt: float = 1.0
    """The episode terminates when the base tilts more than this from upright (rad)."""
    min_base_height: float = 0.15
    """The episode terminates when the base is lower than this above the terrain (m)."""
    init_joint_noise: float = 0.1
    """Initial joint positions are default + uniform(-this, this) (rad)."""
    init_base_vel: float = 0.2
    """Initial base linear and angular velocities are uniform(-this, this)."""
    spawn_clearance: float = 0.03
    """Envs spawn this much higher than the standing keyframe's base height (m)."""
    push_interval_s: float = 0.0
    """Push every env's base every this many seconds; 0 disables pushes."""
    push_velocity: float = 0.5
    """A push changes the base's horizontal velocity by uniform(-this, this) per axis (m/s)."""
    only_positive_rewards: bool = True
    """Clip each step's reward, the termination term aside, at 0 (legged_gym): early on the
    penalties outweigh tracking, and a negative reward per step would teach falling early."""

    def __post_init__(self) -> None:
        _check_range("lin_vel_x", self.lin_vel_x)
        _check_range("lin_vel_y", self.lin_vel_y)
        _check_range("ang_vel_yaw", self.ang_vel_yaw)
        if not 0.0 <= self.standing_fraction <= 1.0:
            raise ConfigError(f"task.standing_fraction={self.standing_fraction} must be in [0, 1]")
        try:
            check_bins(self.name, "command_bins", self.command_bins, ("vx", "vy", "yaw"))
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if not 0.0 < self.soft_limit_fraction <= 1.0:
            raise ConfigError(
                f"task.soft_limit_fraction={self.soft_limit_fraction} must be in (0, 1]"
            )
        for name in ("command_resample_s", "tracking_sigma", "max_tilt"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"task.{name}={getattr(self, name)} must be positive")
        if self.push_interval_s < 0:
            raise ConfigError(
                f"task.push_interval_s={self.push_interval_s} must be >= 0 (0: no pushes)"
            )


class LocomotionTask(Task):
    """Velocity-command tracking for a floating-base robot (not registered itself)."""

    control_dt: ClassVar[float] = 0.02
    base_contact_geoms: ClassVar[tuple[str, ...]] = ()
    """Geoms whose touching the ground ends the episode (trunk, pelvis, torso)."""
    collision_geoms: ClassVar[tuple[str, ...]] = ()
    """Geoms whose touching the ground is penalized by the collision term (thighs)."""
    foot_sites: ClassVar[tuple[str, ...]] = ()
    """One site per foot, in the order of the robot's touch_* sensors."""
    foot_radius: ClassVar[float] = 0.0
    """Height of a foot site above the ground when the foot stands on it (m)."""
    state_attrs: ClassVar[tuple[str, ...]] = ("commands", "feet_air_time", "last_contacts")

    cfg: LocomotionConfig

    def __init__(self, cfg: LocomotionConfig, **kwargs: Any) -> None:
        self.action_dim = self.robot.num_joints
        super().__init__(cfg, **kwargs)
        m, spec, sim = self.model, self.robot, self.sim
        obj = mujoco.mjtObj
        if m.njnt == 0 or m.jnt_type[0] != mujoco.mjtJoint.mjJNT_FREE:
            raise ValueError(f"robot {spec.name!r}: locomotion needs a free joint as joint 0")
        jids = [mujoco.mj_name2id(m, obj.mjOBJ_JOINT, n) for n in spec.joint_names]
        self._qadr = m.jnt_qposadr[jids].astype(np.int64)
        self._dadr = m.jnt_dofadr[jids].astype(np.int64)
        self._act_ids = np.array(
            [mujoco.mj_name2id(m, obj.mjOBJ_ACTUATOR, n) for n in spec.actuator_names]
        )
        self.default_pose = np.asarray(spec.default_pose)
        self._lower = np.asarray(spec.joint_lower)
        self._upper = np.asarray(spec.joint_upper)
        mid, half = (self._upper + self._lower) / 2, (self._upper - self._lower) / 2
        self._soft_lower = mid - cfg.soft_limit_fraction * half
        self._soft_upper = mid + cfg.soft_limit_fraction * half
        self._base_body = mujoco.mj_name2id(m, obj.mjOBJ_BODY, spec.base_body)
        self._key_qpos = m.key_qpos[mujoco.mj_name2id(m, obj.mjOBJ_KEY, spec.keyframe)].copy()

        self._gyro = sim.sensor(spec.sensors["gyro"])
        self._quat = sim.sensor(spec.sensors["orientation"])
        self._vel = sim.sensor(spec.sensors["linear_velocity"])
        touch = [v for k, v in spec.sensors.items() if k.startswith("touch_")]
        self._touch_adr = self._sensor_adr(touch, 1)
        self._base_contact_adr = self._sensor_adr(
            [contact_sensor_name(g) for g in self.base_contact_geoms], CONTACT_SENSOR_DIM
        )
        self._collision_adr = self._sensor_adr(
            [contact_sensor_name(g) for g in self.collision_geoms], CONTACT_SENSOR_DIM
        )
        self._foot_sites = np.array(
            [mujoco.mj_name2id(m, obj.mjOBJ_SITE, s) for s in self.foot_sites], dtype=np.int64
        )
        if len(self._foot_sites) != len(self._touch_adr):
            raise ValueError(
                f"{type(self).__name__}: {len(self.foot_sites)} foot sites but "
                f"{len(touch)} touch sensors in robot {spec.name!r}"
            )
        self._actuator_force = sim.bind("actuator_force")

        n, feet = self.num_envs, len(self.foot_sites)
        self.commands = np.zeros((n, 3))
        """(n, 3) commanded vx, vy (m/s, base frame) and yaw rate (rad/s)."""
        self.feet_air_time = np.zeros((n, feet))
        """(n, feet) seconds since each foot last touched the ground."""
        self.last_contacts = np.zeros((n, feet), dtype=bool)
        self._gait_fresh = False
        self._first_contact = np.zeros((n, feet), dtype=bool)
        self._landed_air_time = np.zeros((n, feet))
        self._resample_steps = max(1, round(cfg.command_resample_s / self.control_dt))
        self._push_steps = round(cfg.push_interval_s / self.control_dt)

    def _sensor_adr(self, names: list[str], dim: int) -> np.ndarray:
        """First sensordata column of each named sensor (each of width dim)."""
        adr = []
        for name in names:
            sid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, name)
            if sid < 0 or int(self.model.sensor_dim[sid]) != dim:
                raise ValueError(f"{type(self).__name__}: no sensor {name!r} of dimension {dim}")
            adr.append(int(self.model.sensor_adr[sid]))
        return np.asarray(adr, dtype=np.int64)

    # -- model --------------------------------------------------------------------------

    def build_model(self) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(str(self.robot.mjcf))
        self.edit_spec(spec)
        add_contact_sensors(spec, self.base_contact_geoms + self.collision_geoms)
        model = spec.compile()
        validate_spec(self.robot, model)
        return model

    def edit_spec(self, spec: mujoco.MjSpec) -> None:
        """Change the scene before compiling (terrain); the default keeps the flat floor."""

    # -- hooks for terrain and curriculum -------------------------------------------------

    def terrain_height(self, xy: np.ndarray) -> np.ndarray:
        """Ground height under world points xy (..., 2); flat floor at 0."""
        return np.zeros(xy.shape[:-1])

    def spawn_xy(self, ids: np.ndarray) -> np.ndarray:
        """(k, 2) base xy where the envs in ids start their next episode."""
        return np.zeros((len(ids), 2))

    def before_reset(self, ids: np.ndarray) -> None:
        """Runs while the envs in ids still hold their last state (curriculum updates)."""

    def extra_policy_obs(self) -> list[np.ndarray]:
        return []

    def extra_critic_obs(self) -> list[np.ndarray]:
        return []

    # -- kinematics (from the live views, once per sim state) ----------------------------

    @per_sim_state
    def projected_gravity(self) -> np.ndarray:
        """(n, 3) unit gravity in the base frame; (0, 0, -1) when upright."""
        return gravity_in_frame(self._quat)

    def base_lin_vel(self) -> np.ndarray:
        """(n, 3) base linear velocity in the base frame (IMU velocimeter)."""
        return self._vel

    def base_ang_vel(self) -> np.ndarray:
        """(n, 3) base angular velocity in the base frame (IMU gyro)."""
        return self._gyro

    def base_pos(self) -> np.ndarray:
        return self.sim.xpos[:, self._base_body]

    @per_sim_state
    def base_height(self) -> np.ndarray:
        pos = self.base_pos()
        result: np.ndarray = pos[:, 2] - self.terrain_height(pos[:, :2])
        return result

    @per_sim_state
    def joint_pos(self) -> np.ndarray:
        return self.sim.qpos[:, self._qadr]

    @per_sim_state
    def joint_vel(self) -> np.ndarray:
        return self.sim.qvel[:, self._dadr]

    @per_sim_state
    def foot_contacts(self) -> np.ndarray:
        """(n, feet) bool: the foot's touch sensor reads more than cfg.contact_force."""
        contacts: np.ndarray = self.sim.sensordata[:, self._touch_adr] > self.cfg.contact_force
        return contacts

    @per_sim_state
    def foot_heights(self) -> np.ndarray:
        """(n, feet) height of each foot's sole above the terrain below it (m)."""
        pos = self.sim.site_xpos[:, self._foot_sites]
        result: np.ndarray = pos[..., 2] - self.terrain_height(pos[..., :2]) - self.foot_radius
        return result

    def _contact_found(self, adr: np.ndarray) -> np.ndarray:
        """(n, len(adr)) bool: each contact sensor found a contact."""
        found: np.ndarray = self.sim.sensordata[:, adr] > 0
        return found

    def _update_gait(self) -> None:
        """Advance foot air times by one control step (once per step, on first use)."""
        if self._gait_fresh:
            return
        contact = self.foot_contacts()
        # A foot counts as down if it touched now or at the last step: touch sensors
        # flicker on hard ground (legged_gym's contact filter).
        down = contact | self.last_contacts
        self.last_contacts = contact.copy()  # reset_envs writes rows; the cache's stays intact
        self._first_contact = (self.feet_air_time > 0) & down
        self.feet_air_time += self.control_dt
        self._landed_air_time = self.feet_air_time * self._first_contact
        self.feet_air_time *= ~down
        self._gait_fresh = True

    def _moving_command(self) -> np.ndarray:
        cmd = self.commands
        moving: np.ndarray = cmd[:, 0] * cmd[:, 0] + cmd[:, 1] * cmd[:, 1] > 0.01
        return moving

    # -- commands, pushes, the step ------------------------------------------------------

    @property
    def num_reset_bins(self) -> int:
        return int(np.prod(self.cfg.command_bins))

    def resample_commands(self, ids: np.ndarray) -> None:
        """Draw new commands for the envs in ids only (a standing_fraction of them zero)."""
        k = len(ids)
        if k == 0:
            return
        cfg = self.cfg
        low = np.array([cfg.lin_vel_x[0], cfg.lin_vel_y[0], cfg.ang_vel_yaw[0]])
        high = np.array([cfg.lin_vel_x[1], cfg.lin_vel_y[1], cfg.ang_vel_yaw[1]])
        if max(cfg.command_bins) > 1:  # (a subclass may cut its bins otherwise)
            low, high = grid_cell_box(low, high, cfg.command_bins, self.episode_bin[ids])
        cmd = self.rng.uniform(low, high, (k, 3))
        cmd[self.rng.random(k) < cfg.standing_fraction] = 0.0
        self.commands[ids] = cmd

    def step(self, actions: np.ndarray) -> StepResult:
        self._gait_fresh = False
        # Resampling before the physics step means the reward of this step already uses the
        # new command (as legged_gym does); the policy sees it from the next observation.
        steps = self.episode_step
        due = np.flatnonzero((steps > 0) & (steps % self._resample_steps == 0))
        self.resample_commands(due)
        if self._push_steps > 0:
            push = np.flatnonzero((steps > 0) & (steps % self._push_steps == 0))
            if push.size:
                dv = np.zeros((push.size, 3))
                v = self.cfg.push_velocity
                dv[:, :2] = self.rng.uniform(-v, v, (push.size, 2))
                self.sim.apply_push(push, dv)
        result = super().step(actions)
        if self.cfg.only_positive_rewards:
            self._clip_negative_reward(result)
        return result

    def _clip_negative_reward(self, result: StepResult) -> None:
        """Raise each step's reward (without its termination term) to at least 0, and the
        running and reported episode returns with it; the terms are logged unclipped."""
        fall = result.reward_terms.get("termination")
        rest = result.reward if fall is None else result.reward - fall
        lift = np.maximum(-rest, 0.0).astype(np.float32)
        result.reward += lift
        done = result.terminated | result.truncated
        result.episode_return[done] += lift[done]
        self.episode_return[~done] += lift[~done]

    def action_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        ctrl = np.empty((self.num_envs, self.model.nu))
        ctrl[:, self._act_ids] = self.default_pose + self.robot.action_scale * actions
        return ctrl

    # -- observations -------------------------------------------------------------------

    def observe(self) -> dict[str, np.ndarray]:
        policy = np.concatenate(
            [
                self.base_ang_vel(),
                self.projected_gravity(),
                self.commands,
                self.joint_pos() - self.default_pose,
                self.joint_vel(),
                self.actions,
                *self.extra_policy_obs(),
            ],
            axis=1,
            dtype=np.float32,
        )
        critic = np.concatenate(
            [
                policy,
                self.base_lin_vel(),
                self.foot_contacts(),
                self.foot_heights(),
                *self.extra_critic_obs(),
            ],
            axis=1,
            dtype=np.float32,
        )
        return {"policy": policy, "critic": critic}

    # -- rewards (each (n,), weighted by default_reward_weights) ------------------------

    def reward_tracking_lin_vel(self) -> np.ndarray:
        err = sum_squares(self.commands[:, :2] - self.base_lin_vel()[:, :2])
        return np.exp(-err / self.cfg.tracking_sigma)

    def reward_tracking_ang_vel(self) -> np.ndarray:
        err = np.square(self.commands[:, 2] - self.base_ang_vel()[:, 2])
        return np.exp(-err / self.cfg.tracking_sigma)

    def reward_lin_vel_z(self) -> np.ndarray:
        return np.square(self.base_lin_vel()[:, 2])

    def reward_ang_vel_xy(self) -> np.ndarray:
        return sum_squares(self.base_ang_vel()[:, :2])

    def reward_orientation(self) -> np.ndarray:
        return sum_squares(self.projected_gravity()[:, :2])

    def reward_base_height(self) -> np.ndarray:
        return np.square(self.base_height() - self.cfg.base_height_target)

    def reward_torques(self) -> np.ndarray:
        return sum_squares(self._actuator_force)

    def reward_dof_acc(self) -> np.ndarray:
        return sum_squares(self.sim.qacc[:, self._dadr])

    def reward_action_rate(self) -> np.ndarray:
        return sum_squares(self.actions - self.prev_actions)

    def reward_dof_pos_limits(self) -> np.ndarray:
        q = self.joint_pos()
        # Outside [lower, upper] by how much: max(q - upper, lower - q, 0).
        over = np.maximum(np.maximum(q - self._soft_upper, self._soft_lower - q), 0.0)
        return np.sum(over, axis=1)

    def reward_feet_air_time(self) -> np.ndarray:
        """Pays (air time - target) at each touchdown, only while commanded to move."""
        self._update_gait()
        landed = self._landed_air_time - self.cfg.air_time_target
        return np.sum(landed * self._first_contact, axis=1) * self._moving_command()

    def reward_collision(self) -> np.ndarray:
        return np.sum(self._contact_found(self._collision_adr), axis=1).astype(np.float64)

    def reward_stand_still(self) -> np.ndarray:
        """Joint deviation from the default pose while commanded to stand."""
        standing = ~self._moving_command() & (np.abs(self.commands[:, 2]) < 0.1)
        return np.sum(np.abs(self.joint_pos() - self.default_pose), axis=1) * standing

    def reward_termination(self) -> np.ndarray:
        return np.logical_or.reduce(list(self._reasons().values())).astype(np.float64)

    def reward_alive(self) -> np.ndarray:
        return np.ones(self.num_envs)

    # -- terminations, resets, metrics ---------------------------------------------------

    def terminations(self) -> dict[str, np.ndarray]:
        return dict(self._reasons())  # a copy: the caller adds its own reasons to it

    @per_sim_state
    def _reasons(self) -> dict[str, np.ndarray]:
        upright = -self.projected_gravity()[:, 2]  # cos of the tilt angle
        reasons: dict[str, np.ndarray] = {
            "bad_orientation": upright < math.cos(self.cfg.max_tilt),
            "base_too_low": self.base_height() < self.cfg.min_base_height,
        }
        if len(self._base_contact_adr):
            reasons["base_contact"] = np.any(self._contact_found(self._base_contact_adr), axis=1)
        return reasons

    def reset_envs(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        k = len(ids)
        if k == 0:
            return
        self.before_reset(ids)
        cfg, rng = self.cfg, self.rng
        qpos = np.tile(self._key_qpos, (k, 1))
        xy = self.spawn_xy(ids)
        qpos[:, :2] = xy
        qpos[:, 2] += self.terrain_height(xy) + cfg.spawn_clearance
        qpos[:, 3:7] = yaw_quat(rng.uniform(-math.pi, math.pi, k))
        noise = rng.uniform(-cfg.init_joint_noise, cfg.init_joint_noise, (k, self.action_dim))
        qpos[:, self._qadr] = np.clip(self.default_pose + noise, self._lower, self._upper)
        qvel = np.zeros((k, self.model.nv))
        qvel[:, :6] = rng.uniform(-cfg.init_base_vel, cfg.init_base_vel, (k, 6))
        self.sim.reset(ids, qpos=qpos, qvel=qvel)
        self.resample_commands(ids)
        self.feet_air_time[ids] = 0.0
        self.last_contacts[ids] = False

    def task_metrics(self) -> dict[str, np.ndarray]:
        vel = self.base_lin_vel()
        return {
            "vel_error": np.linalg.norm(vel[:, :2] - self.commands[:, :2], axis=1),
            "cmd_vx": self.commands[:, 0].copy(),
            "base_vx": vel[:, 0].copy(),
        }
