"""Reward terms and metrics shared by the reaching tasks (`arm_reach`, `planar_reach`): a
point to bring onto a target, scored by the distance between them."""

from __future__ import annotations

from typing import Any

import numpy as np


class ReachTerms:
    """Mixin for a Task with a `distance` (n,) property and a config holding
    `tracking_sigma`, `fine_tracking_sigma` and `success_tolerance` (metres)."""

    cfg: Any

    @property
    def distance(self) -> np.ndarray:
        """(n,) distance (m) from the reaching point to the target; the task defines it."""
        raise NotImplementedError

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
