"""Reward terms and metrics shared by the reaching tasks (`arm_reach`, `planar_reach`): a
point to bring onto a target, scored by the distance between them."""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import numpy as np


class ReachTerms(abc.ABC):
    """Mixin for a Task with a `distance` (n,) property and a config holding
    `tracking_sigma`, `fine_tracking_sigma` and `success_tolerance` (metres)."""

    cfg: Any
    # Terms are in [0, 1] or small penalties, times control_dt: holding the target for a
    # whole episode returns just under 2 x its length in seconds.
    default_reward_weights: ClassVar[dict[str, float]] = {
        "tracking": 1.0,
        "tracking_fine": 1.0,
        "action_rate": -0.01,
        "joint_velocity": -0.001,
        "success": 0.0,  # off by default; the sparse variant: task.reward_weights.success=1
    }

    @property
    @abc.abstractmethod
    def distance(self) -> np.ndarray:
        """(n,) distance (m) from the reaching point to the target."""

    def reward_tracking(self) -> np.ndarray:
        return 1.0 - np.tanh(self.distance / self.cfg.tracking_sigma)

    def reward_tracking_fine(self) -> np.ndarray:
        """The last centimetres: 1 - tanh(d / fine_tracking_sigma)."""
        return 1.0 - np.tanh(self.distance / self.cfg.fine_tracking_sigma)

    def reward_success(self) -> np.ndarray:
        """1 while the distance is below success_tolerance (sparse)."""
        return (self.distance < self.cfg.success_tolerance).astype(np.float64)

    def task_metrics(self) -> dict[str, np.ndarray]:
        distance = self.distance
        return {
            "success": (distance < self.cfg.success_tolerance).astype(np.float32),
            "distance": distance.astype(np.float32),
        }
