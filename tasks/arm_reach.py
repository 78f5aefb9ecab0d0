"""Arm reach: bring the arm's end effector to a target point sampled in a box above the table.

Also home of `ArmTask`, the joint-space plumbing both arm tasks share (action mapping, joint
observations, resets around the default pose); `arm_lift_cube` builds on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from unilab.config.schema import TaskConfig
from unilab.robots import get_robot
from unilab.robots.spec import RobotSpec
from unilab.tasks.base import Task
from unilab.tasks.reach_terms import ReachTerms
from unilab.tasks.registry import register_task
from unilab.tasks.reset_bins import check_bins, grid_cell_box

GRIPPER_OPEN = 0.04
"""Gripper actuator target (m per finger) that holds the hand fully open."""


def sample_box(rng: np.random.Generator, low: list[float], high: list[float], n: int) -> np.ndarray:
    """(n, 3) points drawn uniformly in the axis-aligned box [low, high]."""
    return rng.uniform(
        np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64), (n, 3)
    )


def check_box(task: str, name: str, low: list[float], high: list[float]) -> None:
    lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    if lo.shape != (3,) or hi.shape != (3,) or not (lo <= hi).all():
        raise ValueError(
            f"task {task!r}: {name}_low={list(low)} and {name}_high={list(high)} must be three "
            "numbers each (x, y, z in metres) with low <= high"
        )


class ArmTask(Task):
    """Joint-space control of the 7-DoF arm: target = default pose + action_scale * action.

    Subclasses set `action_dim` (7, or 8 with a gripper command) and override `gripper_ctrl`.
    """

    robot: ClassVar[RobotSpec] = get_robot("arm")
    control_dt: ClassVar[float] = 0.02
    # 0.5 rad per unit (the spec's scale) and |action| <= 3: the +-1.5 rad band around the
    # ready pose reaches the whole default target box (a Jacobian controller gets every
    # sampled target); with +-1 rad, 3 % of targets (far and low) are out of reach.
    action_clip: ClassVar[float] = 3.0

    def __init__(self, cfg: TaskConfig, **kwargs: object) -> None:
        super().__init__(cfg, **kwargs)  # type: ignore[arg-type]
        m, spec = self.model, self.robot
        joints = [m.joint(name) for name in spec.joint_names]
        self._qpos_adr = np.array([int(j.qposadr[0]) for j in joints])
        self._dof_adr = np.array([int(j.dofadr[0]) for j in joints])
        self._arm_act = np.array([m.actuator(name).id for name in spec.actuator_names])
        assert spec.gripper_actuator is not None and spec.end_effector_site is not None
        self._gripper_act = m.actuator(spec.gripper_actuator).id
        self._ee_site = m.site(spec.end_effector_site).id
        self._default_pose = np.asarray(spec.default_pose, dtype=np.float64)
        self._ctrl_low = m.actuator_ctrlrange[self._arm_act, 0].copy()
        self._ctrl_high = m.actuator_ctrlrange[self._arm_act, 1].copy()
        key = m.key(spec.keyframe).id if spec.keyframe else -1
        self._home_qpos = m.key_qpos[key].copy() if key >= 0 else m.qpos0.copy()
        self._ctrl = np.zeros((self.num_envs, m.nu), dtype=np.float64)

    # -- actions ------------------------------------------------------------------------
    def action_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        arm = self._default_pose + self.robot.action_scale * actions[:, :7]
        self._ctrl[:, self._arm_act] = np.clip(arm, self._ctrl_low, self._ctrl_high)
        self._ctrl[:, self._gripper_act] = self.gripper_ctrl(actions)
        return self._ctrl

    def gripper_ctrl(self, actions: np.ndarray) -> np.ndarray | float:
        """Gripper actuator target per env; the base holds the hand open."""
        return GRIPPER_OPEN

    # -- state views --------------------------------------------------------------------
    @property
    def joint_pos(self) -> np.ndarray:
        """(n, 7) arm joint positions."""
        return self.sim.qpos[:, self._qpos_adr]

    @property
    def joint_vel(self) -> np.ndarray:
        """(n, 7) arm joint velocities."""
        return self.sim.qvel[:, self._dof_adr]

    @property
    def ee_pos(self) -> np.ndarray:
        """(n, 3) end-effector (fingertip centre) position in the world (= base) frame."""
        return self.sim.site_xpos[:, self._ee_site]

    def bind_target_marker(self) -> np.ndarray | None:
        """Live (n, 3) position view of the scene's mocap target body (per env: mocap_pos is
        simulation state), or None when the scene has no such body."""
        name = self.robot.bodies.get("target")
        if name is None:
            return None
        try:
            body = self.model.body(name)
        except KeyError:
            return None
        mocap_id = int(self.model.body_mocapid[body.id])
        return self.sim.bind("mocap_pos")[:, mocap_id] if mocap_id >= 0 else None

    def joint_obs(self) -> list[np.ndarray]:
        """Joint positions relative to the default pose, joint velocities."""
        return [self.joint_pos - self._default_pose, self.joint_vel]

    # -- rewards shared by arm tasks ----------------------------------------------------
    def reward_action_rate(self) -> np.ndarray:
        return np.sum(np.square(self.actions - self.prev_actions), axis=1)

    def reward_joint_velocity(self) -> np.ndarray:
        return np.sum(np.square(self.joint_vel), axis=1)

    # -- resets -------------------------------------------------------------------------
    def home_qpos_rows(self, n: int, joint_noise: float) -> np.ndarray:
        """(n, nq) keyframe states with the arm joints jittered uniformly by +-joint_noise."""
        qpos = np.tile(self._home_qpos, (n, 1))
        noise = self.rng.uniform(-joint_noise, joint_noise, (n, 7))
        qpos[:, self._qpos_adr] = np.clip(
            self._default_pose + noise, self._ctrl_low, self._ctrl_high
        )
        return qpos


@dataclass
class ArmReachConfig(TaskConfig):
    name: str = "arm_reach"
    episode_length_s: float = 6.0
    target_low: list[float] = field(default_factory=lambda: [0.3, -0.25, 0.15])
    """Lower corner (x, y, z in m, base frame; the table top is z = 0) of the target box."""
    target_high: list[float] = field(default_factory=lambda: [0.6, 0.25, 0.5])
    """Upper corner of the target box."""
    resample_s: float = 0.0
    """Draw a new target every this many seconds within an episode; 0 keeps one per episode."""
    success_tolerance: float = 0.02
    """The end effector counts as on target within this distance (m)."""
    tracking_sigma: float = 0.1
    """Length scale (m) of the coarse tracking term 1 - tanh(d / sigma)."""
    fine_tracking_sigma: float = 0.01
    """Length scale (m) of the fine tracking term, which sharpens the last centimetres."""
    init_joint_noise: float = 0.1
    """Initial arm joint positions are the default pose +- this (rad), uniform."""
    target_bins: list[int] = field(default_factory=lambda: [1, 1, 1])
    """Reset bins: the target box cut into this many cells along x, y and z; each episode's
    target is drawn in one cell (`runtime.allocation` chooses how often each). [1, 1, 1]:
    one box, no bins."""


@register_task("arm_reach", ArmReachConfig)
class ArmReach(ReachTerms, ArmTask):
    """Move the arm's end effector to a random target point above the table (7 joint actions)."""

    # Reward weights: ReachTerms.default_reward_weights.
    state_attrs: ClassVar[tuple[str, ...]] = ("target", "steps_to_resample")

    cfg: ArmReachConfig

    def __init__(self, cfg: ArmReachConfig, **kwargs: object) -> None:
        check_box(cfg.name, "target", cfg.target_low, cfg.target_high)
        if cfg.resample_s < 0 or cfg.success_tolerance <= 0:
            raise ValueError(
                f"task {cfg.name!r}: resample_s must be >= 0 (got {cfg.resample_s}) and "
                f"success_tolerance > 0 (got {cfg.success_tolerance})"
            )
        check_bins(cfg.name, "target_bins", cfg.target_bins, "xyz")
        if cfg.tracking_sigma <= 0 or cfg.fine_tracking_sigma <= 0:
            raise ValueError(
                f"task {cfg.name!r}: tracking_sigma and fine_tracking_sigma must be > 0, got "
                f"{cfg.tracking_sigma} and {cfg.fine_tracking_sigma}"
            )
        self.action_dim = 7
        super().__init__(cfg, **kwargs)
        n = self.num_envs
        self._resample_steps = round(cfg.resample_s / self.control_dt)
        self._mocap = self.bind_target_marker()
        self.target = np.zeros((n, 3), dtype=np.float64)
        """(n, 3) target point per env, world frame; drawn at each reset."""
        self.steps_to_resample = np.zeros(n, dtype=np.int64)
        """Control steps until the next mid-episode target draw (unused when resample_s = 0)."""
        # Until the first reset(): the box centre, drawn without touching the rng.
        centre = (np.asarray(cfg.target_low) + np.asarray(cfg.target_high)) / 2.0
        self.set_target(np.arange(n), np.tile(centre, (n, 1)))

    # -- targets ------------------------------------------------------------------------
    def set_target(self, ids: np.ndarray, points: np.ndarray) -> None:
        """Set the target of envs ids to points (len(ids), 3) and show it with the mocap body."""
        self.target[ids] = points
        if self._mocap is not None:
            self._mocap[ids] = points

    @property
    def num_reset_bins(self) -> int:
        return int(np.prod(self.cfg.target_bins))

    def bin_box(self, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(k, 3) lower and upper corners of the target cells of reset bins `bins` (bin =
        x-major index into the target_bins grid)."""
        return grid_cell_box(self.cfg.target_low, self.cfg.target_high, self.cfg.target_bins, bins)

    def _draw_targets(self, ids: np.ndarray) -> None:
        if self.num_reset_bins > 1:
            low, high = self.bin_box(self.episode_bin[ids])
            points = self.rng.uniform(low, high)
        else:
            points = sample_box(self.rng, self.cfg.target_low, self.cfg.target_high, len(ids))
        self.set_target(ids, points)
        self.steps_to_resample[ids] = self._resample_steps

    @property
    def ee_to_target(self) -> np.ndarray:
        return self.target - self.ee_pos

    @property
    def distance(self) -> np.ndarray:
        """(n,) end-effector to target distance (m)."""
        return np.linalg.norm(self.ee_to_target, axis=1)

    # -- task API -----------------------------------------------------------------------
    def observe(self) -> dict[str, np.ndarray]:
        parts = [*self.joint_obs(), self.ee_pos, self.target, self.ee_to_target, self.actions]
        return {"policy": np.concatenate(parts, axis=1, dtype=np.float32)}

    def terminations(self) -> dict[str, np.ndarray]:
        # Runs once per step after the rewards and before the observations: a target drawn
        # here is scored from the next step on and seen in this step's observation.
        if self._resample_steps > 0:
            self.steps_to_resample -= 1
            due = np.flatnonzero(self.steps_to_resample <= 0)
            if due.size:
                self._draw_targets(due)
        return {}

    def reset_envs(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids)
        qpos = self.home_qpos_rows(len(ids), self.cfg.init_joint_noise)
        self.sim.reset(ids, qpos=qpos, qvel=np.zeros(self.model.nv))
        self._draw_targets(ids)
