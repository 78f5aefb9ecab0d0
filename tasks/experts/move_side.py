"""Expert for arm_move_side: modes = slide the cube there with the closed fingers, or pick
it up and carry it (`PushOrCarryExpert`), straight across the side's line."""

from __future__ import annotations

import numpy as np

from unilab.tasks.arm_move_side import SIDE_DIRECTION, ArmMoveSide
from unilab.tasks.experts.base import register_expert
from unilab.tasks.experts.push_carry import PushOrCarryExpert


@register_expert("arm_move_side")
class MoveSideExpert(PushOrCarryExpert):
    task: ArmMoveSide

    def __init__(self, task: ArmMoveSide, seed: int = 0) -> None:
        self.depth = np.zeros(task.num_envs)
        """How far past the side's line the cube is taken (m), per episode."""
        super().__init__(task, seed)

    def draw_goal(self, ids: np.ndarray) -> None:
        """Straight across the line from the cube's start, a random depth past it."""
        self.depth[ids] = self.rng.uniform(0.05, 0.09, ids.size)
        start = self.task.cube_pos[ids, 0, :2]
        u = SIDE_DIRECTION[self.task.side[ids]]
        past = self._line()[ids] + self.depth[ids] - np.einsum("ij,ij->i", start, u)
        self.goal_xy[ids] = start + u * np.maximum(past, 0.0)[:, None]

    def push_direction(self) -> np.ndarray:
        return SIDE_DIRECTION[self.task.side]

    def pushed_far_enough(self, cube: np.ndarray, u: np.ndarray) -> np.ndarray:
        return np.einsum("ij,ij->i", cube, u) > self._line() + self.depth

    def _line(self) -> np.ndarray:
        """(n,) position of the side's line along the push direction."""
        left, right, far = self.task.cfg.side_lines
        return np.array([left, -right, far])[self.task.side]
