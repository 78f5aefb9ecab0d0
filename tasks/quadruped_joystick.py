"""Quadruped joystick: track a commanded planar velocity and yaw rate, on flat ground or on a
curriculum of rough terrain (legged_gym / MuJoCo Playground style).

Observations: `policy` = gyro, projected gravity, command, joint positions minus default,
joint velocities, last action (45 values); `critic` = policy + base linear velocity, foot
contacts and foot heights (privileged), and on rough terrain a height scan around the base.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import mujoco
import numpy as np

from unilab.config.errors import ConfigError
from unilab.robots import get_robot
from unilab.robots.spec import RobotSpec
from unilab.tasks.locomotion_terms import LocomotionConfig, LocomotionTask
from unilab.tasks.registry import register_task
from unilab.tasks.terrain import Terrain, TerrainConfig

# legged_gym's Go1/A1 weights (each term times control_dt), plus stand_still so zero
# commands are held in the default pose, and a small fall penalty.
_QUADRUPED_WEIGHTS = {
    "tracking_lin_vel": 1.0,
    "tracking_ang_vel": 0.5,
    "lin_vel_z": -2.0,
    "ang_vel_xy": -0.05,
    "orientation": -1.0,
    "base_height": 0.0,
    "torques": -0.0002,
    "dof_acc": -2.5e-7,
    "action_rate": -0.01,
    "dof_pos_limits": -10.0,
    "feet_air_time": 1.0,
    "collision": -1.0,
    "stand_still": -0.2,
    "termination": -10.0,
}


@dataclass
class QuadrupedJoystickFlatConfig(LocomotionConfig):
    name: str = "quadruped_joystick_flat"


class QuadrupedJoystickBase(LocomotionTask):
    robot: ClassVar[RobotSpec] = get_robot("quadruped")
    default_reward_weights: ClassVar[dict[str, float]] = _QUADRUPED_WEIGHTS
    action_clip: ClassVar[float] = 4.0
    """Targets within default +- 1 rad (action_scale 0.25): room for a full gait."""
    base_contact_geoms: ClassVar[tuple[str, ...]] = ("trunk",)
    collision_geoms: ClassVar[tuple[str, ...]] = ("FR_thigh", "FL_thigh", "RR_thigh", "RL_thigh")
    foot_sites: ClassVar[tuple[str, ...]] = ("FR_foot", "FL_foot", "RR_foot", "RL_foot")
    foot_radius: ClassVar[float] = 0.02


@register_task("quadruped_joystick_flat", QuadrupedJoystickFlatConfig)
class QuadrupedJoystickFlat(QuadrupedJoystickBase):
    """Go1-size quadruped tracks commanded (vx, vy, yaw rate) on flat ground."""


@dataclass
class QuadrupedJoystickRoughConfig(LocomotionConfig):
    name: str = "quadruped_joystick_rough"
    terrain: TerrainConfig = field(default_factory=TerrainConfig)
    """The curriculum terrain (tiles of rising difficulty in one height field)."""
    curriculum: bool = True
    """Move each env's terrain level up or down at its resets; off: levels stay as drawn."""
    min_init_level: int = 0
    """Envs start on a level drawn uniformly from min_init_level..max_init_level; setting
    both to the top level (with curriculum off) evaluates a policy on the hardest terrain."""
    max_init_level: int = 3
    """Upper end of the starting levels (see min_init_level)."""
    level_bins: bool = False
    """Reset bins are the terrain levels: each episode starts on the level drawn as its bin,
    so `runtime.allocation` decides how often each level is walked (with
    `runtime.allocation_success_return`: the task has no success metric). Replaces the
    curriculum, so it needs curriculum=false."""
    level_up_distance: float = 4.0
    """An env whose episode ends this far (m) from its spawn point goes one level up."""
    level_down_fraction: float = 0.5
    """An env that fell, or covered less than this fraction of its commanded distance, goes
    one level down."""
    spawn_spread: float = 0.5
    """Spawn points are the tile centre + uniform(-this, this) per axis (m)."""
    scan_x: tuple[float, ...] = (-0.8, -0.6, -0.4, -0.2, 0.0, 0.2, 0.4, 0.6, 0.8)
    """Height-scan points along the base's heading (m)."""
    scan_y: tuple[float, ...] = (-0.4, -0.2, 0.0, 0.2, 0.4)
    """Height-scan points across the base's heading (m)."""
    height_scan_in_policy: bool = False
    """Also give the policy the height scan (by default only the critic sees it)."""
    min_base_height: float = 0.12

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.max_init_level < self.terrain.num_levels:
            raise ConfigError(
                f"task.max_init_level={self.max_init_level} must be in 0..terrain.num_levels-1 "
                f"= {self.terrain.num_levels - 1}"
            )
        if not 0 <= self.min_init_level <= self.max_init_level:
            raise ConfigError(
                f"task.min_init_level={self.min_init_level} must be in 0..task.max_init_level "
                f"= {self.max_init_level}"
            )
        if self.level_bins and max(self.command_bins) > 1:
            raise ConfigError(
                "task.level_bins and task.command_bins both cut episodes into reset bins; "
                "use one of them"
            )
        if self.level_bins and self.curriculum:
            raise ConfigError(
                "task.level_bins=true lets runtime.allocation choose each episode's terrain "
                "level; it replaces the curriculum: also set task.curriculum=false"
            )
        if not self.scan_x or not self.scan_y:
            raise ConfigError("task.scan_x and task.scan_y each need at least one point")


# Ray origins sit this high above the base so they start above any step in front of it.
_SCAN_LIFT = 1.0
# Geom group 0 only: the terrain; the robot's geoms live in groups 2 and 3.
_TERRAIN_GROUPS = np.array([1, 0, 0, 0, 0, 0], dtype=np.uint8)


@register_task("quadruped_joystick_rough", QuadrupedJoystickRoughConfig)
class QuadrupedJoystickRough(QuadrupedJoystickBase):
    """Go1-size quadruped tracks commanded velocities over a curriculum of rough terrain."""

    state_attrs: ClassVar[tuple[str, ...]] = (
        *QuadrupedJoystickBase.state_attrs,
        "terrain_levels",
        "terrain_kinds",
        "env_origins",
    )
    cfg: QuadrupedJoystickRoughConfig

    def __init__(self, cfg: QuadrupedJoystickRoughConfig, **kwargs: Any) -> None:
        self.terrain = Terrain(cfg.terrain)  # build_model (in super().__init__) needs it
        super().__init__(cfg, **kwargs)
        n = self.num_envs
        self.terrain_levels = self.rng.integers(cfg.min_init_level, cfg.max_init_level + 1, n)
        """(n,) each env's terrain level (row of tiles)."""
        self.terrain_kinds = np.arange(n) % self.terrain.num_kinds
        """(n,) each env's terrain kind (column of tiles); fixed."""
        self.env_origins = np.zeros((n, 2))
        """(n, 2) where each env spawned this episode (world xy)."""
        self.graduations = np.zeros(n, np.int64)
        """(n,) times each env mastered the top level (and restarted on a random one)."""
        gx, gy = np.meshgrid(cfg.scan_x, cfg.scan_y, indexing="ij")
        self.scan_points = np.stack([gx.ravel(), gy.ravel(), np.full(gx.size, _SCAN_LIFT)], 1)
        """(k, 3) height-scan points in the base's heading frame."""

    def edit_spec(self, spec: mujoco.MjSpec) -> None:
        spec.delete(spec.geom("floor"))
        self.terrain.add_to_spec(spec)

    def terrain_height(self, xy: np.ndarray) -> np.ndarray:
        return self.terrain.height_at(xy)

    @property
    def num_reset_bins(self) -> int:
        return self.terrain.num_levels if self.cfg.level_bins else super().num_reset_bins

    def spawn_xy(self, ids: np.ndarray) -> np.ndarray:
        if self.cfg.level_bins:  # the episode's bin, drawn before reset_envs, is its level
            self.terrain_levels[ids] = self.episode_bin[ids]
        centers = self.terrain.tile_centers(self.terrain_levels[ids], self.terrain_kinds[ids])
        spread = self.cfg.spawn_spread
        xy = centers + self.rng.uniform(-spread, spread, (len(ids), 2))
        self.env_origins[ids] = xy
        return xy

    def before_reset(self, ids: np.ndarray) -> None:
        """Curriculum: up after walking far, down after a fall or too short a walk."""
        cfg = self.cfg
        ended = ids[self.episode_step[ids] > 0]  # the very first reset has no episode
        if not cfg.curriculum or ended.size == 0:
            return
        walked = np.linalg.norm(self.base_pos()[ended, :2] - self.env_origins[ended], axis=1)
        elapsed = self.episode_step[ended] * self.control_dt
        expected = np.linalg.norm(self.commands[ended, :2], axis=1) * elapsed
        fell = self.episode_step[ended] < self.max_episode_steps
        up = walked > cfg.level_up_distance
        down = ~up & (fell | (walked < cfg.level_down_fraction * expected))
        levels = self.terrain_levels[ended] + up.astype(np.int64) - down.astype(np.int64)
        # Envs that master the top level go to a random level so every level stays in use.
        top = levels >= self.terrain.num_levels
        self.graduations[ended[top]] += 1
        levels[top] = self.rng.integers(0, self.terrain.num_levels, int(top.sum()))
        self.terrain_levels[ended] = np.maximum(levels, 0)

    def height_scan(self) -> np.ndarray:
        """(n, k) base height above the terrain at each scan point, minus the target height,
        clipped to [-1, 1] m."""
        dist = self.sim.ray_heights(
            self.scan_points, self._base_body, geomgroup=_TERRAIN_GROUPS, miss_distance=10.0
        )
        return np.clip(dist - _SCAN_LIFT - self.cfg.base_height_target, -1.0, 1.0)

    def extra_policy_obs(self) -> list[np.ndarray]:
        return [self.height_scan()] if self.cfg.height_scan_in_policy else []

    def extra_critic_obs(self) -> list[np.ndarray]:
        return [] if self.cfg.height_scan_in_policy else [self.height_scan()]

    def task_metrics(self) -> dict[str, np.ndarray]:
        metrics = super().task_metrics()
        metrics["terrain_level"] = self.terrain_levels.astype(np.float64)
        # The mean level stays below the top even when the top is mastered (graduates restart
        # on a random level), so the share on the top level and the graduations show it.
        metrics["terrain_top"] = (self.terrain_levels == self.terrain.num_levels - 1).astype(
            np.float64
        )
        metrics["terrain_graduations"] = self.graduations.astype(np.float64)
        return metrics


__all__ = [
    "QuadrupedJoystickFlat",
    "QuadrupedJoystickFlatConfig",
    "QuadrupedJoystickRough",
    "QuadrupedJoystickRoughConfig",
]
