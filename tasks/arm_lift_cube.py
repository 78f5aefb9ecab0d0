"""Arm lift cube: grasp the 5 cm cube from a random spot on the table and lift it to a goal
point above the table (7 arm joint actions plus 1 gripper command)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import mujoco
import numpy as np

from unilab.config.schema import TaskConfig
from unilab.robots.validate import validate_spec
from unilab.tasks.arm_reach import GRIPPER_OPEN, ArmTask, check_box, sample_box
from unilab.tasks.registry import register_task
from unilab.tasks.reset_bins import check_bins, grid_cell_box

# intprm of a contact sensor: report "found" and force, reduce to the net force, 1 contact.
_CONTACT_FOUND_AND_FORCE = (1 << int(mujoco.mjtConDataField.mjCONDATA_FOUND)) | (
    1 << int(mujoco.mjtConDataField.mjCONDATA_FORCE)
)
_CONTACT_NETFORCE = 3
FINGER_PADS = ("left_pad", "right_pad")
CUBE_HALF_SIZE = 0.025


@dataclass
class ArmLiftCubeConfig(TaskConfig):
    name: str = "arm_lift_cube"
    episode_length_s: float = 6.0
    cube_low: list[float] = field(default_factory=lambda: [0.4, -0.15])
    """Lower corner (x, y in m, base frame) of the area the cube is placed in at reset."""
    cube_high: list[float] = field(default_factory=lambda: [0.6, 0.15])
    """Upper corner of the cube's reset area."""
    cube_yaw_range: float = 0.0
    """Cube yaw at reset is uniform in +- this (rad); the cube is 90-degree symmetric."""
    goal_low: list[float] = field(default_factory=lambda: [0.4, -0.15, 0.2])
    """Lower corner (x, y, z in m; the table top is z = 0) of the goal box for the cube."""
    goal_high: list[float] = field(default_factory=lambda: [0.6, 0.15, 0.3])
    """Upper corner of the goal box."""
    lifted_height: float = 0.04
    """The cube counts as lifted when its centre is above this height (m; 0.025 at rest)."""
    success_height: float = 0.15
    """Success: the cube's centre is at least this high above the table (m)."""
    off_table_height: float = -0.05
    """The episode terminates when the cube's centre drops below this height (m)."""
    reach_sigma: float = 0.25
    """Length scale (m) of the reach term 1 - tanh(|cube - ee| / sigma)."""
    goal_sigma: float = 0.3
    """Length scale (m) of the coarse cube-to-goal term."""
    goal_fine_sigma: float = 0.05
    """Length scale (m) of the fine cube-to-goal term."""
    init_joint_noise: float = 0.1
    """Initial arm joint positions are the default pose +- this (rad), uniform."""
    cube_bins: list[int] = field(default_factory=lambda: [1, 1])
    """Reset bins: the cube's reset area cut into this many cells along x and y; each
    episode places the cube in one cell (`runtime.allocation` chooses how often each).
    [1, 1]: one area, no bins."""


@register_task("arm_lift_cube", ArmLiftCubeConfig)
class ArmLiftCube(ArmTask):
    """Grasp the cube and lift it to a goal point above the table (7 joint + 1 gripper actions)."""

    # Staged terms: reach the cube, close both fingers on it, lift it off the table, then
    # carry it to the goal (the goal terms count only while it is lifted).
    default_reward_weights: ClassVar[dict[str, float]] = {
        "reach": 1.0,
        "grasp": 0.5,
        "lift": 5.0,
        "goal_tracking": 5.0,
        "goal_tracking_fine": 2.0,
        "action_rate": -0.005,
        "joint_velocity": -0.0001,
    }
    state_attrs: ClassVar[tuple[str, ...]] = ("goal",)

    cfg: ArmLiftCubeConfig

    def __init__(self, cfg: ArmLiftCubeConfig, **kwargs: object) -> None:
        check_box(cfg.name, "goal", cfg.goal_low, cfg.goal_high)
        check_box(cfg.name, "cube", [*cfg.cube_low, 0.0], [*cfg.cube_high, 0.0])
        check_bins(cfg.name, "cube_bins", cfg.cube_bins, "xy")
        for name in ("reach_sigma", "goal_sigma", "goal_fine_sigma"):
            if getattr(cfg, name) <= 0:
                raise ValueError(f"task {cfg.name!r}: {name} must be > 0, got {getattr(cfg, name)}")
        self.action_dim = 8
        super().__init__(cfg, **kwargs)
        m, n = self.model, self.num_envs
        self._cube_body = m.body(self.robot.bodies["object"]).id
        self._cube_qpos = int(m.joint(self._cube_joint_name()).qposadr[0])
        self._fingers = np.array(
            [int(m.joint(j).qposadr[0]) for j in ("finger_left", "finger_right")]
        )
        self._pad_contacts = [self.sim.sensor(f"cube_contact_{pad}") for pad in FINGER_PADS]
        self._mocap = self.bind_target_marker()
        self.goal = np.zeros((n, 3), dtype=np.float64)
        """(n, 3) goal point for the cube per env, world frame; drawn at each reset."""
        centre = (np.asarray(cfg.goal_low) + np.asarray(cfg.goal_high)) / 2.0
        self._set_goal(np.arange(n), np.tile(centre, (n, 1)))

    def build_model(self) -> mujoco.MjModel:
        """The arm scene plus one contact sensor per finger pad, against the cube only."""
        spec = mujoco.MjSpec.from_file(str(self.robot.mjcf))
        cube_geom = self.robot.bodies["object"]  # the cube's geom shares its body's name
        for pad in FINGER_PADS:
            spec.add_sensor(
                name=f"cube_contact_{pad}",
                type=mujoco.mjtSensor.mjSENS_CONTACT,
                objtype=mujoco.mjtObj.mjOBJ_GEOM,
                objname=pad,
                reftype=mujoco.mjtObj.mjOBJ_GEOM,
                refname=cube_geom,
                intprm=[_CONTACT_FOUND_AND_FORCE, _CONTACT_NETFORCE, 1],
            )
        model = spec.compile()
        validate_spec(self.robot, model)
        return model

    def _cube_joint_name(self) -> str:
        jid = int(self.model.body_jntadr[self._cube_body])
        if jid < 0 or self.model.jnt_type[jid] != mujoco.mjtJoint.mjJNT_FREE:
            raise ValueError(f"task {self.cfg.name!r}: the cube body needs a free joint")
        return str(self.model.joint(jid).name)

    # -- actions ------------------------------------------------------------------------
    def gripper_ctrl(self, actions: np.ndarray) -> np.ndarray:
        """-1 closes, +1 opens fully; values between command a partial opening."""
        return GRIPPER_OPEN * 0.5 * (1.0 + np.clip(actions[:, 7], -1.0, 1.0))

    # -- state views --------------------------------------------------------------------
    @property
    def cube_pos(self) -> np.ndarray:
        return self.sim.xpos[:, self._cube_body]

    @property
    def cube_quat(self) -> np.ndarray:
        """(n, 4) cube orientation (w, x, y, z) with w >= 0 (q and -q are the same rotation)."""
        q = self.sim.xquat[:, self._cube_body]
        return np.where(q[:, :1] < 0.0, -q, q)

    @property
    def gripper_opening(self) -> np.ndarray:
        """(n,) mean finger slide (m): 0 closed, 0.04 open."""
        return self.sim.qpos[:, self._fingers].mean(axis=1)

    @property
    def grasped(self) -> np.ndarray:
        """(n,) bool: both finger pads touch the cube."""
        return (self._pad_contacts[0][:, 0] > 0) & (self._pad_contacts[1][:, 0] > 0)

    @property
    def lifted(self) -> np.ndarray:
        return self.cube_pos[:, 2] > self.cfg.lifted_height

    def _set_goal(self, ids: np.ndarray, points: np.ndarray) -> None:
        self.goal[ids] = points
        if self._mocap is not None:
            self._mocap[ids] = points

    # -- task API -----------------------------------------------------------------------
    def observe(self) -> dict[str, np.ndarray]:
        ee, cube = self.ee_pos, self.cube_pos
        parts = [
            *self.joint_obs(),
            self.gripper_opening[:, None],
            ee,
            cube,
            cube - ee,
            self.cube_quat,
            self.goal,
            self.goal - cube,
            self.actions,
        ]
        return {"policy": np.concatenate(parts, axis=1, dtype=np.float32)}

    def reward_reach(self) -> np.ndarray:
        distance = np.linalg.norm(self.cube_pos - self.ee_pos, axis=1)
        return 1.0 - np.tanh(distance / self.cfg.reach_sigma)

    def reward_grasp(self) -> np.ndarray:
        return self.grasped.astype(np.float64)

    def reward_lift(self) -> np.ndarray:
        return self.lifted.astype(np.float64)

    def _goal_distance(self) -> np.ndarray:
        return np.linalg.norm(self.goal - self.cube_pos, axis=1)

    def reward_goal_tracking(self) -> np.ndarray:
        return self.lifted * (1.0 - np.tanh(self._goal_distance() / self.cfg.goal_sigma))

    def reward_goal_tracking_fine(self) -> np.ndarray:
        return self.lifted * (1.0 - np.tanh(self._goal_distance() / self.cfg.goal_fine_sigma))

    def terminations(self) -> dict[str, np.ndarray]:
        return {"cube_off_table": self.cube_pos[:, 2] < self.cfg.off_table_height}

    @property
    def num_reset_bins(self) -> int:
        return int(np.prod(self.cfg.cube_bins))

    def reset_envs(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids)
        k = len(ids)
        qpos = self.home_qpos_rows(k, self.cfg.init_joint_noise)
        cube = self._cube_qpos
        low, high = np.asarray(self.cfg.cube_low), np.asarray(self.cfg.cube_high)
        if self.num_reset_bins > 1:
            low, high = grid_cell_box(
                self.cfg.cube_low, self.cfg.cube_high, self.cfg.cube_bins, self.episode_bin[ids]
            )
        qpos[:, cube : cube + 2] = self.rng.uniform(low, high, (k, 2))
        qpos[:, cube + 2] = CUBE_HALF_SIZE
        half_yaw = 0.5 * self.rng.uniform(-self.cfg.cube_yaw_range, self.cfg.cube_yaw_range, k)
        qpos[:, cube + 3 : cube + 7] = 0.0
        qpos[:, cube + 3] = np.cos(half_yaw)
        qpos[:, cube + 6] = np.sin(half_yaw)
        self.sim.reset(ids, qpos=qpos, qvel=np.zeros(self.model.nv))
        self._set_goal(ids, sample_box(self.rng, self.cfg.goal_low, self.cfg.goal_high, k))

    def task_metrics(self) -> dict[str, np.ndarray]:
        height = self.cube_pos[:, 2]
        return {
            "success": (height >= self.cfg.success_height).astype(np.float32),
            "cube_height": height.astype(np.float32),
            "grasped": self.grasped.astype(np.float32),
            "goal_distance": self._goal_distance().astype(np.float32),
        }
