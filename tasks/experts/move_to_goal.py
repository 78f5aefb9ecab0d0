"""Expert for arm_move_to_goal: modes = slide the cube onto the disc with the closed
fingers, or pick it up and carry it there (`PushOrCarryExpert`). Each push is aimed at the
disc from where the cube is when the hand comes over it, and held for that push; a push
that leaves the cube short or to the side of the disc's centre is started over from there."""

from __future__ import annotations

import numpy as np

from unilab.tasks.arm_move_to_goal import ArmMoveToGoal
from unilab.tasks.experts.base import register_expert
from unilab.tasks.experts.push_carry import PUSH, PushOrCarryExpert

CLOSE_ENOUGH = 0.02
"""A push that leaves the cube's centre further than this (m) from the disc's centre is
started over (the task's tolerance is 4 cm)."""


@register_expert("arm_move_to_goal")
class MoveToGoalExpert(PushOrCarryExpert):
    task: ArmMoveToGoal

    def __init__(self, task: ArmMoveToGoal, seed: int = 0) -> None:
        self.push_u = np.tile([1.0, 0.0], (task.num_envs, 1))
        """(n, 2) direction of each env's current push."""
        super().__init__(task, seed)

    def draw_goal(self, ids: np.ndarray) -> None:
        self.goal_xy[ids] = self.task.goal_pos[ids, :2]

    def push_direction(self) -> np.ndarray:
        aiming = self.phase == self.P_ABOVE
        to_goal = self.goal_xy[aiming] - self.task.cube_pos[aiming, 0, :2]
        norm = np.maximum(np.linalg.norm(to_goal, axis=1, keepdims=True), 1e-6)
        self.push_u[aiming] = to_goal / norm
        return self.push_u

    def push_lead(self, cube: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Never aim the hand past where the cube's centre would sit on the disc's: a
        pushed cube slides on a little when the hand stops."""
        return np.clip(np.einsum("ij,ij->i", self.goal_xy - cube, u), 0.0, 0.03)

    def pushed_far_enough(self, cube: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The cube's centre is within 1 cm of the disc's centre along the push (the
        hand's last millimetres of lead barely move it)."""
        return np.einsum("ij,ij->i", self.goal_xy - cube, u) < 0.01

    def plan(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        out = super().plan()
        cube = self.task.cube_pos[:, 0, :2]
        off = np.linalg.norm(self.goal_xy - cube, axis=1) > CLOSE_ENOUGH
        again = (self.mode == PUSH) & (self.phase == self.P_BACK) & (self.timer >= 8) & off
        self.advance(again, to=self.P_ABOVE)
        return out
