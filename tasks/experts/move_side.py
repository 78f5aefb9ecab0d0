"""Expert for arm_move_side: modes = slide the cube there with the closed fingers, or pick
it up and carry it."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from unilab.tasks.arm_move_side import SIDE_DIRECTION, ArmMoveSide
from unilab.tasks.experts.base import PickPlaceExpert, register_expert
from unilab.tasks.tabletop_scene import CUBE_HALF

PUSH, CARRY = 0, 1
_PAD_HALF_THICKNESS = 0.016
"""Half the closed fingers' depth along the push direction (m)."""


@register_expert("arm_move_side")
class MoveSideExpert(PickPlaceExpert):
    mode_names: ClassVar[tuple[str, ...]] = ("push", "carry")
    judges_mistakes: ClassVar[bool] = False  # see off_track
    task: ArmMoveSide
    # Push phases (PickPlaceExpert's phases serve the carry mode).
    P_ABOVE, P_DOWN, P_PUSH, P_BACK = 0, 1, 2, 3

    def __init__(self, task: ArmMoveSide, seed: int = 0) -> None:
        self.depth = np.zeros(task.num_envs)
        """How far past the side's line the cube is taken (m), per episode."""
        self.goal_xy = np.zeros((task.num_envs, 2))
        """Where a carried cube is set down: straight across the line from its start."""
        super().__init__(task, seed)

    def on_reset(self, ids: np.ndarray) -> None:
        super().on_reset(ids)
        self.pick[ids] = 0
        self.turn[ids] = self.rng.integers(0, 2, ids.size)
        self.depth[ids] = self.rng.uniform(0.05, 0.09, ids.size)
        start = self.task.cube_pos[ids, 0, :2]
        u = SIDE_DIRECTION[self.task.side[ids]]
        past = self._line()[ids] + self.depth[ids] - np.einsum("ij,ij->i", start, u)
        self.goal_xy[ids] = start + u * np.maximum(past, 0.0)[:, None]

    def resume(self, ids: np.ndarray) -> None:
        """A cube in the hand is carried across (CARRY), whatever mode the seed drew."""
        self.mode[self.holding(ids)] = CARRY
        super().resume(ids)

    def off_track(self, actions: np.ndarray) -> np.ndarray:
        """No missed-grasp judgement here: closed fingers without the cube between them are
        also how this task's push mode moves the cube."""
        return np.zeros(self.num_envs, dtype=bool)

    def _direction(self) -> np.ndarray:
        return SIDE_DIRECTION[self.task.side]

    def _line(self) -> np.ndarray:
        """(n,) position of the side's line along the push direction."""
        left, right, far = self.task.cfg.side_lines
        return np.array([left, -right, far])[self.task.side]

    def place_target(self) -> tuple[np.ndarray, np.ndarray]:
        return self.goal_xy, np.full(self.num_envs, 0.03)

    def plan(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        carry = self.mode == CARRY
        target, yaw, grip, speed = self.pick_place_plan(carry)
        push = ~carry
        if push.any():
            self._push_plan(push, target, yaw, grip, speed)
        return target, yaw, grip, speed

    def _push_plan(
        self,
        active: np.ndarray,
        target: np.ndarray,
        yaw: np.ndarray,
        grip: np.ndarray,
        speed: np.ndarray,
    ) -> None:
        """Fill the push envs' plan in place: close the fingers, come down behind the cube,
        push it across the line (steering onto its centre), back off."""
        t = self.task
        u = self._direction()
        normal = np.stack([-u[:, 1], u[:, 0]], axis=1)
        cube = t.cube_pos[:, 0, :2]
        behind = cube - u * (CUBE_HALF + _PAD_HALF_THICKNESS + 0.03)
        ph = self.phase
        grip[active] = -1.0
        yaw[active] = np.arctan2(u[active, 1], u[active, 0])  # hand x along the push

        m = active & (ph == self.P_ABOVE)
        target[m, :2], target[m, 2] = behind[m], self.hover[m]
        done_above = m & self.reached(target, 0.02, yaw)

        m = active & (ph == self.P_DOWN)
        target[m, :2], target[m, 2] = behind[m], CUBE_HALF
        speed[m] = np.minimum(speed[m], 0.6)
        done_down = m & self.reached(target, 0.01)

        m = active & (ph == self.P_PUSH)
        ee = t.ee_pos[:, :2]
        lateral = np.einsum("ij,ij->i", cube - ee, normal)
        along_cube = np.einsum("ij,ij->i", cube, u)
        # Aim 3 cm past the contact point, on the cube's centre line.
        contact = cube - u * (CUBE_HALF + _PAD_HALF_THICKNESS)
        target[m, :2] = contact[m] + 0.03 * u[m]
        target[m, 2] = CUBE_HALF
        speed[m] = np.minimum(speed[m], 0.5)
        done_push = m & (along_cube > self._line() + self.depth)
        lost = m & (np.abs(lateral) > 0.025)

        m = active & (ph == self.P_BACK)
        early = m & (self.timer < 4)  # slide back 4 cm off the cube, then rise
        target[early, :2] = t.ee_target[early, :2] - 0.01 * u[early]
        target[early, 2] = CUBE_HALF
        target[m & ~early, 2] = 0.12

        for mask in (done_above, done_down, done_push):
            self.advance(mask)
        self.advance(lost, to=self.P_ABOVE)
