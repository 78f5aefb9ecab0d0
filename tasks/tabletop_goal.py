"""Tabletop tasks whose named cube must come to rest on a coloured goal disc (a mocap body
named "goal"): the success rule, the reward's object and goal, and the goal-distance
metric, shared by arm_around_obstacle and arm_move_to_goal."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from unilab.tasks.tabletop import TabletopConfig, TabletopTask


@dataclass
class GoalDiscConfig(TabletopConfig):
    goal_tolerance: float = 0.04
    """Success: the cube's centre within this (m) of the goal's centre, resting."""


class GoalDiscTask(TabletopTask):
    """Base of the goal-disc tasks; the layout must have `goal_marker=True`."""

    cfg: GoalDiscConfig

    @property
    def goal_pos(self) -> np.ndarray:
        return self.mocap_position("goal")

    def goal_distance(self) -> np.ndarray:
        """(n,) horizontal distance (m) from the named cube's centre to the goal's."""
        return np.linalg.norm(self.cube_pos[:, 0, :2] - self.goal_pos[:, :2], axis=1)

    def success(self) -> np.ndarray:
        near = self.goal_distance() < self.cfg.goal_tolerance
        return near & (self.cube_pos[:, 0, 2] < 0.04) & self.settled(0)

    def object_and_goal(self) -> tuple[np.ndarray, np.ndarray]:
        return self.cube_pos[:, 0], self.goal_pos + np.array([0.0, 0.0, 0.025])

    def task_metrics(self) -> dict[str, np.ndarray]:
        return {
            "success": self.success().astype(np.float32),
            "goal_distance": self.goal_distance().astype(np.float32),
        }
