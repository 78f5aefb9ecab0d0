"""Cart-pole balance: keep the pole upright and the cart near the centre. The smoke-test task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from unilab.config.schema import TaskConfig
from unilab.robots import get_robot
from unilab.robots.spec import RobotSpec
from unilab.tasks.base import Task
from unilab.tasks.registry import register_task


@dataclass
class CartpoleBalanceConfig(TaskConfig):
    name: str = "cartpole_balance"
    episode_length_s: float = 10.0
    max_pole_angle: float = 0.6
    """The episode terminates when |pole angle| exceeds this (rad)."""
    max_cart_pos: float = 2.0
    """The episode terminates when |cart position| exceeds this (m)."""
    init_angle: float = 0.15
    """Initial pole angle is uniform in [-init_angle, init_angle] (rad)."""
    init_cart_pos: float = 0.2
    """Initial cart position is uniform in [-init_cart_pos, init_cart_pos] (m)."""
    balance_tolerance: float = 0.05
    """The sparse `balanced` reward term pays 1 while |pole angle| is below this (rad)."""
    center_tolerance: float = 0.1
    """The sparse `balanced_at_center` term also needs |cart position| below this (m)."""
    success_at_center: bool = False
    """Success also needs |cart position| < center_tolerance at the episode's last step
    (the goal of the bring-it-home variant; by default any cart position on the rail)."""
    init_angle_bins: int = 1
    """Reset bins: |initial pole angle| in [0, init_angle] cut into this many equal bands
    (the sign stays random), so bins differ in difficulty; `runtime.allocation` chooses
    how often each starts. 1: one band, no bins."""
    init_cart_bins: int = 1
    """Reset bins over |initial cart position| in [0, init_cart_pos], as for the angle;
    with both, a bin is one (angle band, cart band) pair."""
    swing_up: bool = False
    """The swing-up variant: the pole may fall and turn freely (no `pole_fell`
    termination), `init_angle` may reach pi (hanging down), and success is the pole
    within max_pole_angle of upright and turning slower than `success_max_pole_speed` at
    the episode's last step, so a pole swinging through the top does not count."""
    success_max_pole_speed: float = 2.0
    """Swing-up success: the largest |pole angular velocity| (rad/s) at the last step."""


@register_task("cartpole_balance", CartpoleBalanceConfig)
class CartpoleBalance(Task):
    """Balance a pole on a cart with a force on the cart (1 action, 4 observations)."""

    robot: ClassVar[RobotSpec] = get_robot("cartpole")
    control_dt: ClassVar[float] = 0.02
    # Each term is in [0, 1] or a small penalty, times control_dt: the best return is
    # episode_length_s (10 for the default 10 s episode).
    default_reward_weights: ClassVar[dict[str, float]] = {
        "upright": 1.0,
        "balanced": 0.0,
        "balanced_at_center": 0.0,
        "centered": 0.0,
        "cart_velocity": -0.01,
        "pole_velocity": -0.005,
        "action_rate": -0.01,
    }

    cfg: CartpoleBalanceConfig

    def __init__(self, cfg: CartpoleBalanceConfig, **kwargs: object) -> None:
        for key in ("init_angle_bins", "init_cart_bins"):
            if getattr(cfg, key) < 1:
                raise ValueError(f"task {cfg.name!r}: {key}={getattr(cfg, key)} must be >= 1")
        if not 0 <= cfg.init_cart_pos < cfg.max_cart_pos:
            raise ValueError(
                f"task {cfg.name!r}: init_cart_pos={cfg.init_cart_pos} must be in [0, "
                f"max_cart_pos={cfg.max_cart_pos}) or episodes start off the rail"
            )
        if cfg.center_tolerance <= 0:
            raise ValueError(
                f"task {cfg.name!r}: center_tolerance={cfg.center_tolerance} must be > 0"
            )
        if not 0 < cfg.balance_tolerance < cfg.max_pole_angle:
            raise ValueError(
                f"task {cfg.name!r}: balance_tolerance={cfg.balance_tolerance} must be in "
                f"(0, max_pole_angle={cfg.max_pole_angle})"
            )
        if cfg.success_max_pole_speed <= 0:
            raise ValueError(
                f"task {cfg.name!r}: success_max_pole_speed={cfg.success_max_pole_speed} must "
                "be > 0 (rad/s)"
            )
        if cfg.swing_up and not 0 <= cfg.init_angle <= np.pi:
            raise ValueError(
                f"task {cfg.name!r}: init_angle={cfg.init_angle} must be in [0, pi] for the "
                "swing-up variant (pi: hanging straight down)"
            )
        if not cfg.swing_up and not 0 <= cfg.init_angle < cfg.max_pole_angle:
            raise ValueError(
                f"task {cfg.name!r}: init_angle={cfg.init_angle} must be in [0, "
                f"max_pole_angle={cfg.max_pole_angle}) or episodes start fallen (or set "
                "task.swing_up=true to start below)"
            )
        self.action_dim = 1
        super().__init__(cfg, **kwargs)  # type: ignore[arg-type]

    @property
    def num_reset_bins(self) -> int:
        return self.cfg.init_angle_bins * self.cfg.init_cart_bins

    def action_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        return actions.astype(np.float64)

    def observe(self) -> dict[str, np.ndarray]:
        q, v = self.sim.qpos, self.sim.qvel
        policy = np.stack([q[:, 0], np.cos(q[:, 1]), np.sin(q[:, 1]), v[:, 0], v[:, 1]], axis=1)
        return {"policy": policy.astype(np.float32)}

    def pole_angle(self) -> np.ndarray:
        """(n,) pole angle from upright wrapped to [-pi, pi] (the hinge turns freely, so in
        the swing-up variant the raw joint angle can be several turns)."""
        q = self.sim.qpos[:, 1]
        return np.arctan2(np.sin(q), np.cos(q))

    def reward_upright(self) -> np.ndarray:
        return np.clip(np.cos(self.sim.qpos[:, 1]), 0.0, 1.0)

    def reward_balanced(self) -> np.ndarray:
        """1 while the pole is within balance_tolerance of upright (sparse; off by default)."""
        return (np.abs(self.pole_angle()) < self.cfg.balance_tolerance).astype(np.float64)

    def reward_balanced_at_center(self) -> np.ndarray:
        """1 while the pole is balanced and the cart within center_tolerance of the centre
        (sparse; off by default): far starts earn nothing until the policy can carry the
        pole home, so the cart bands learn near-first."""
        home = np.abs(self.sim.qpos[:, 0]) < self.cfg.center_tolerance
        return self.reward_balanced() * home

    def reward_centered(self) -> np.ndarray:
        return np.exp(-np.square(self.sim.qpos[:, 0]))

    def reward_cart_velocity(self) -> np.ndarray:
        return np.square(self.sim.qvel[:, 0])

    def reward_pole_velocity(self) -> np.ndarray:
        return np.square(self.sim.qvel[:, 1])

    def reward_action_rate(self) -> np.ndarray:
        return np.sum(np.square(self.actions - self.prev_actions), axis=1)

    def terminations(self) -> dict[str, np.ndarray]:
        q = self.sim.qpos
        cart_out = np.abs(q[:, 0]) > self.cfg.max_cart_pos
        if self.cfg.swing_up:
            return {"cart_out": cart_out}
        return {"pole_fell": np.abs(q[:, 1]) > self.cfg.max_pole_angle, "cart_out": cart_out}

    def reset_envs(self, ids: np.ndarray) -> None:
        n = len(ids)
        qpos = np.zeros((n, 2))
        angle_band, cart_band = np.divmod(self.episode_bin[ids], self.cfg.init_cart_bins)
        qpos[:, 0] = self._signed_in_band(
            cart_band, self.cfg.init_cart_bins, self.cfg.init_cart_pos
        )
        qpos[:, 1] = self._signed_in_band(angle_band, self.cfg.init_angle_bins, self.cfg.init_angle)
        qvel = self.rng.uniform(-0.05, 0.05, (n, 2))
        self.sim.reset(ids, qpos=qpos, qvel=qvel)

    def _signed_in_band(self, band: np.ndarray, bands: int, limit: float) -> np.ndarray:
        """Uniform in [-limit, limit], or with `bands` > 1 a magnitude in the given band of
        [0, limit] and a random sign."""
        if bands == 1:
            return self.rng.uniform(-limit, limit, len(band))
        width = limit / bands
        size = self.rng.uniform(band * width, (band + 1) * width)
        return np.where(self.rng.random(len(band)) < 0.5, -size, size)

    def task_metrics(self) -> dict[str, np.ndarray]:
        q = self.sim.qpos
        angle = np.abs(self.pole_angle())
        # Scored at an episode's last step: 1 when it ran to the time limit balanced.
        cart_limit = (
            self.cfg.center_tolerance if self.cfg.success_at_center else self.cfg.max_cart_pos
        )
        upright = (angle <= self.cfg.max_pole_angle) & (np.abs(q[:, 0]) <= cart_limit)
        if self.cfg.swing_up:
            upright &= np.abs(self.sim.qvel[:, 1]) <= self.cfg.success_max_pole_speed
        return {"pole_angle_abs": angle, "success": upright.astype(np.float32)}
