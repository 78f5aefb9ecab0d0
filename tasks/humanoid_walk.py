"""Humanoid walk: the 19-DoF H1-size humanoid walks forward at a commanded speed.

Built on the shared locomotion machinery (commands, IMU kinematics, terminations); adds a
gait clock to the policy observation and the biped terms of Unitree's public H1 RL
examples: feet in contact when the clock says stance, swing feet lifted, hips kept straight,
an alive bonus. Observations: `policy` = gyro, projected gravity, command, joint positions
minus default, joint velocities, last action, sin/cos of the gait phase (69 values);
`critic` = policy + base linear velocity, foot contacts, foot heights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from unilab.config.errors import ConfigError
from unilab.robots import get_robot
from unilab.robots.spec import RobotSpec
from unilab.tasks.locomotion_terms import LocomotionConfig, LocomotionTask
from unilab.tasks.registry import register_task

_HIP_DEVIATION_JOINTS = ("left_hip_yaw", "left_hip_roll", "right_hip_yaw", "right_hip_roll")


@dataclass
class HumanoidWalkConfig(LocomotionConfig):
    name: str = "humanoid_walk"
    lin_vel_x: tuple[float, float] = (0.0, 1.0)
    lin_vel_y: tuple[float, float] = (0.0, 0.0)
    ang_vel_yaw: tuple[float, float] = (0.0, 0.0)
    standing_fraction: float = 0.1
    base_height_target: float = 0.98
    air_time_target: float = 0.4
    max_tilt: float = 0.8
    min_base_height: float = 0.6
    init_joint_noise: float = 0.05
    init_base_vel: float = 0.1
    spawn_clearance: float = 0.01
    gait_period_s: float = 0.8
    """Duration of one gait cycle (left and right step) of the gait clock (s)."""
    stance_fraction: float = 0.55
    """Fraction of the gait cycle each foot should spend on the ground."""
    swing_height: float = 0.08
    """Target sole height of a swinging foot (m)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gait_period_s <= 0:
            raise ConfigError(f"task.gait_period_s={self.gait_period_s} must be positive")
        if not 0.0 < self.stance_fraction < 1.0:
            raise ConfigError(f"task.stance_fraction={self.stance_fraction} must be in (0, 1)")


@register_task("humanoid_walk", HumanoidWalkConfig)
class HumanoidWalk(LocomotionTask):
    """H1-size humanoid walks forward at a commanded speed without falling."""

    robot: ClassVar[RobotSpec] = get_robot("humanoid")
    action_clip: ClassVar[float] = 4.0
    base_contact_geoms: ClassVar[tuple[str, ...]] = ("pelvis", "torso")
    foot_sites: ClassVar[tuple[str, ...]] = ("left_foot", "right_foot")
    foot_radius: ClassVar[float] = 0.015  # half the sole's thickness: the site is at its centre
    default_reward_weights: ClassVar[dict[str, float]] = {
        "tracking_lin_vel": 1.0,
        "tracking_ang_vel": 0.5,
        "lin_vel_z": -2.0,
        "ang_vel_xy": -0.05,
        "orientation": -1.0,
        "base_height": -10.0,
        "torques": -1e-5,
        "dof_acc": -2.5e-7,
        "action_rate": -0.01,
        "dof_pos_limits": -5.0,
        "feet_air_time": 0.0,
        "gait_contact": 0.18,
        "feet_swing_height": -20.0,
        "hip_deviation": -1.0,
        "alive": 0.15,
        "termination": -10.0,
    }

    cfg: HumanoidWalkConfig

    def __init__(self, cfg: HumanoidWalkConfig, **kwargs: Any) -> None:
        super().__init__(cfg, **kwargs)
        names = list(self.robot.joint_names)
        self._hip_cols = np.array([names.index(j) for j in _HIP_DEVIATION_JOINTS])

    def gait_phase(self) -> np.ndarray:
        """(n,) position in the gait cycle, in [0, 1), from the episode clock."""
        t = self.episode_step * self.control_dt
        phase: np.ndarray = np.mod(t / self.cfg.gait_period_s, 1.0)
        return phase

    def expected_stance(self) -> np.ndarray:
        """(n, 2) bool: left / right foot should be down; both while told to stand still."""
        phase = self.gait_phase()
        legs = np.stack([phase, np.mod(phase + 0.5, 1.0)], axis=1)
        stance: np.ndarray = (legs < self.cfg.stance_fraction) | ~self._moving_command()[:, None]
        return stance

    def extra_policy_obs(self) -> list[np.ndarray]:
        angle = 2 * np.pi * self.gait_phase()
        return [np.stack([np.sin(angle), np.cos(angle)], axis=1)]

    def reward_gait_contact(self) -> np.ndarray:
        """Feet whose contact matches the gait clock (0, 1 or 2)."""
        match = self.foot_contacts() == self.expected_stance()
        return np.sum(match, axis=1).astype(np.float64)

    def reward_feet_swing_height(self) -> np.ndarray:
        """Squared error of swing-foot height to cfg.swing_height, for feet in the air."""
        airborne = ~self.foot_contacts()
        err = np.square(self.foot_heights() - self.cfg.swing_height)
        return np.sum(err * airborne, axis=1)

    def reward_hip_deviation(self) -> np.ndarray:
        """Hip yaw and roll away from the default pose (legs kept straight under the body)."""
        dev = self.joint_pos()[:, self._hip_cols] - self.default_pose[self._hip_cols]
        return np.sum(np.square(dev), axis=1)
