"""Expert for arm_around_obstacle: modes = left or right around the wall, mirror images of
each other. The cube is grasped with the hand's long side across the path (|yaw| <= 45
degrees: the hand, 20 cm long, then never reaches back over the wall at the goal), carried
below the wall's top through two via points beside the wall's end, and set down on the
goal."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from unilab.tasks.arm_around_obstacle import ArmAroundObstacle
from unilab.tasks.experts.base import PickPlaceExpert, register_expert
from unilab.tasks.tabletop_scene import WALL_HALF


@register_expert("arm_around_obstacle")
class AroundObstacleExpert(PickPlaceExpert):
    mode_names: ClassVar[tuple[str, ...]] = ("left of the wall", "right of the wall")
    num_via: ClassVar[int] = 2
    task: ArmAroundObstacle

    def on_reset(self, ids: np.ndarray) -> None:
        super().on_reset(ids)
        k = ids.size
        self.pick[ids] = 0
        self.turn[ids] = 0
        self.carry[ids] = self.rng.uniform(0.07, 0.09, k)
        side = np.where(self.mode[ids] == 0, 1.0, -1.0)  # left is +y
        wall = self.task.wall_pos[ids]
        clear = WALL_HALF[1] + self.rng.uniform(0.14, 0.18, k)
        before = wall[:, 0] - WALL_HALF[0] - self.rng.uniform(0.06, 0.1, k)
        after = wall[:, 0] + WALL_HALF[0] + self.rng.uniform(0.06, 0.1, k)
        self.via[ids, 0] = np.stack([before, wall[:, 1] + side * clear], axis=1)
        self.via[ids, 1] = np.stack([after, wall[:, 1] + side * clear], axis=1)

    def resume(self, ids: np.ndarray) -> None:
        """A cube in the hand goes around the side of the wall it is on (its via points
        drawn again for that side), from the first via point it has not yet passed along
        the path (x), or straight to the goal once past both: going back to a via point
        would teach the opposite of the demonstrations."""
        held = self.holding(ids)
        if held.size:
            left = self.task.cube_pos[held, 0, 1] >= self.task.wall_pos[held, 1]
            self.mode[held] = np.where(left, 0, 1)
            self.on_reset(held)
        super().resume(ids)
        if held.size:
            x = self.task.cube_pos[held, 0, 0]
            passed = (x[:, None] >= self.via[held, :, 0]).sum(axis=1)
            on_path = passed > 0
            self.phase[held[on_path]] = self.VIA + passed[on_path]  # VIA + num_via: TRANSPORT

    def place_target(self) -> tuple[np.ndarray, np.ndarray]:
        return self.task.goal_pos[:, :2], np.full(self.num_envs, 0.03)
