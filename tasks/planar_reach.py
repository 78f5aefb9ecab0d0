"""Planar reach: bring the planar arm's fingertip onto a target on the floor around it.

The arm starts stretched out along +x, so targets differ in how far the fingertip must
travel: with `target_bins` the ring of targets is cut into (radius band, angle sector)
cells, sector 0 centred on the start direction and the middle sector straight behind.
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
from unilab.tasks.reset_bins import check_bins

REACH = 0.24
"""Fingertip distance from the shoulder with the arm stretched out (m): the two links."""


@dataclass
class PlanarReachConfig(TaskConfig):
    name: str = "planar_reach"
    episode_length_s: float = 3.0
    target_radius: list[float] = field(default_factory=lambda: [0.06, 0.22])
    """Targets lie in this ring of distances from the shoulder (m), uniform over its area."""
    success_tolerance: float = 0.05
    """The fingertip counts as on target within this distance (m; the easy reacher's target
    size; at 0.02 the preset's policy ends within it on about half the episodes)."""
    tracking_sigma: float = 0.1
    """Length scale (m) of the coarse tracking term 1 - tanh(d / sigma)."""
    fine_tracking_sigma: float = 0.01
    """Length scale (m) of the fine tracking term, which sharpens the last centimetres."""
    init_joint_noise: float = 0.1
    """Initial joint angles are the stretched-out pose +- this (rad), uniform."""
    target_bins: list[int] = field(default_factory=lambda: [1, 1])
    """Reset bins: the ring cut into this many radius bands and angle sectors; sector k of
    n is centred on angle 2 pi k / n from the start direction. [1, 1]: no bins."""


@register_task("planar_reach", PlanarReachConfig)
class PlanarReach(ReachTerms, Task):
    """Move the planar arm's fingertip to a random target (2 joint-target actions, 14
    observations)."""

    robot: ClassVar[RobotSpec] = get_robot("planar_arm")
    control_dt: ClassVar[float] = 0.02
    # An action is the joint targets (rad) themselves: |action| <= pi reaches straight
    # behind; a zero action holds the stretched-out start pose.
    action_clip: ClassVar[float] = float(np.pi)
    # Reward weights: ReachTerms.default_reward_weights.
    state_attrs: ClassVar[tuple[str, ...]] = ("target",)

    cfg: PlanarReachConfig

    def __init__(self, cfg: PlanarReachConfig, **kwargs: object) -> None:
        radius = list(cfg.target_radius)
        if len(radius) != 2 or not 0 <= radius[0] <= radius[1] <= REACH:
            raise ValueError(
                f"task {cfg.name!r}: target_radius={list(cfg.target_radius)} must be [min, max]"
                f" distances (m) with 0 <= min <= max <= {REACH} (the arm's reach)"
            )
        sizes = {
            "success_tolerance": cfg.success_tolerance,
            "tracking_sigma": cfg.tracking_sigma,
            "fine_tracking_sigma": cfg.fine_tracking_sigma,
        }
        bad = [f"{key}={value}" for key, value in sizes.items() if value <= 0]
        if bad:
            raise ValueError(f"task {cfg.name!r}: {', '.join(bad)} must be > 0 (metres)")
        check_bins(cfg.name, "target_bins", cfg.target_bins, ("radius", "angle"))
        self.action_dim = 2
        super().__init__(cfg, **kwargs)  # type: ignore[arg-type]
        self._fingertip = self.model.site(self.robot.sites["fingertip"]).id
        self._mocap = self.sim.bind("mocap_pos")[:, 0]
        servos = [self.model.actuator(name).id for name in self.robot.actuator_names]
        self._ctrl_low = self.model.actuator_ctrlrange[servos, 0].copy()
        self._ctrl_high = self.model.actuator_ctrlrange[servos, 1].copy()
        self.target = np.zeros((self.num_envs, 2), dtype=np.float64)
        """(n, 2) target point per env on the floor plane (x, y in m); drawn at each reset."""
        # Until the first reset(): straight ahead at the ring's outer edge, no rng drawn.
        outer = np.tile([radius[1], 0.0], (self.num_envs, 1))
        self.set_target(np.arange(self.num_envs), outer)

    @property
    def num_reset_bins(self) -> int:
        return int(np.prod(self.cfg.target_bins))

    def set_target(self, ids: np.ndarray, points: np.ndarray) -> None:
        """Set the target of envs ids (len(ids), 2) and move the marker there."""
        self.target[ids] = points
        self._mocap[ids, :2] = points

    def bin_cells(self, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(k, 2) lower and upper corners, as (radius, angle), of the cells of bins `bins`
        (radius-major index into the target_bins grid)."""
        n_radius, n_angle = self.cfg.target_bins
        band, sector = np.divmod(np.asarray(bins, dtype=np.int64), n_angle)
        r0, r1 = self.cfg.target_radius
        width = (r1 - r0) / n_radius
        radius = np.stack([r0 + band * width, r0 + (band + 1) * width], axis=1)
        half = np.pi / n_angle
        centre = 2.0 * half * sector
        angle = np.stack([centre - half, centre + half], axis=1)
        lows = np.stack([radius[:, 0], angle[:, 0]], axis=1)
        return lows, np.stack([radius[:, 1], angle[:, 1]], axis=1)

    def _draw_targets(self, ids: np.ndarray) -> None:
        if self.num_reset_bins > 1:
            low, high = self.bin_cells(self.episode_bin[ids])
        else:
            r0, r1 = self.cfg.target_radius
            low = np.tile([r0, -np.pi], (len(ids), 1))
            high = np.tile([r1, np.pi], (len(ids), 1))
        # uniform over the cell's area: radius^2 uniform between the band's squares
        radius = np.sqrt(self.rng.uniform(np.square(low[:, 0]), np.square(high[:, 0])))
        angle = self.rng.uniform(low[:, 1], high[:, 1])
        self.set_target(ids, np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1))

    @property
    def fingertip(self) -> np.ndarray:
        """(n, 2) fingertip position on the floor plane (m)."""
        return self.sim.site_xpos[:, self._fingertip, :2]

    @property
    def distance(self) -> np.ndarray:
        """(n,) fingertip to target distance (m)."""
        return np.linalg.norm(self.target - self.fingertip, axis=1)

    def action_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        target = np.asarray(self.robot.default_pose) + self.robot.action_scale * actions
        return np.clip(target, self._ctrl_low, self._ctrl_high)

    def observe(self) -> dict[str, np.ndarray]:
        q, v = self.sim.qpos, self.sim.qvel
        tip = self.fingertip
        parts = [np.cos(q), np.sin(q), v, tip, self.target, self.target - tip, self.actions]
        return {"policy": np.concatenate(parts, axis=1, dtype=np.float32)}

    def reward_action_rate(self) -> np.ndarray:
        return np.sum(np.square(self.actions - self.prev_actions), axis=1)

    def reward_joint_velocity(self) -> np.ndarray:
        return np.sum(np.square(self.sim.qvel), axis=1)

    def terminations(self) -> dict[str, np.ndarray]:
        return {}

    def reset_envs(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids)
        noise = self.cfg.init_joint_noise
        qpos = self.rng.uniform(-noise, noise, (len(ids), 2))
        self.sim.reset(ids, qpos=qpos, qvel=np.zeros(2))
        self._draw_targets(ids)
