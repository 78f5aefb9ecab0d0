"""Push-or-carry experts: modes = slide the cube with the closed fingers, or pick it up and
carry it. The push comes down behind the cube, pushes along a direction (steering onto the
cube's centre line, starting over when the cube slips sideways) and backs off; the carry is
the pick-and-place plan. A task supplies the direction, when a push has gone far enough and
where a carried cube is set down."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from unilab.tasks.experts.base import PickPlaceExpert
from unilab.tasks.tabletop import TabletopTask
from unilab.tasks.tabletop_scene import CUBE_HALF

PUSH, CARRY = 0, 1
_PAD_HALF_THICKNESS = 0.016
"""Half the closed fingers' depth along the push direction (m)."""


class PushOrCarryExpert(PickPlaceExpert):
    mode_names: ClassVar[tuple[str, ...]] = ("push", "carry")
    judges_mistakes: ClassVar[bool] = False  # see off_track
    # Push phases (PickPlaceExpert's phases serve the carry mode).
    P_ABOVE, P_DOWN, P_PUSH, P_BACK = 0, 1, 2, 3

    def __init__(self, task: TabletopTask, seed: int = 0) -> None:
        self.goal_xy = np.zeros((task.num_envs, 2))
        """Where a carried cube is set down, per env."""
        super().__init__(task, seed)

    def on_reset(self, ids: np.ndarray) -> None:
        super().on_reset(ids)
        self.pick[ids] = 0
        self.turn[ids] = self.rng.integers(0, 2, ids.size)
        self.draw_goal(ids)

    def draw_goal(self, ids: np.ndarray) -> None:
        """Set `goal_xy[ids]` (and any per-episode push noise) for new episodes."""
        raise NotImplementedError

    def push_direction(self) -> np.ndarray:
        """(n, 2) unit direction each env's cube is pushed along, now."""
        raise NotImplementedError

    def pushed_far_enough(self, cube: np.ndarray, u: np.ndarray) -> np.ndarray:
        """(n,) whether the pushed cube (xy) has arrived."""
        raise NotImplementedError

    def push_lead(self, cube: np.ndarray, u: np.ndarray) -> np.ndarray:
        """(n,) how far (m) ahead of the contact point the pushing hand aims."""
        return np.full(len(cube), 0.03)

    def resume(self, ids: np.ndarray) -> None:
        """A cube in the hand is carried on (CARRY), whatever mode the seed drew."""
        self.mode[self.holding(ids)] = CARRY
        super().resume(ids)

    def off_track(self, actions: np.ndarray) -> np.ndarray:
        """No missed-grasp judgement here: closed fingers without the cube between them are
        also how the push mode moves the cube."""
        return np.zeros(self.num_envs, dtype=bool)

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
        push it along the direction (steering onto its centre), back off."""
        t = self.task
        u = self.push_direction()
        normal = np.stack([-u[:, 1], u[:, 0]], axis=1)
        cube = t.cube_pos[:, 0, :2]
        behind = cube - u * (CUBE_HALF + _PAD_HALF_THICKNESS + 0.03)
        ph = self.phase
        grip[active] = -1.0
        # Hand x along the push; the closed hand is the same turned half a turn, so the
        # wrist takes the nearer of the two (a push toward the base needs no 180-degree turn).
        heading = np.arctan2(u[active, 1], u[active, 0])
        half_turn = np.where(heading > 0, -np.pi, np.pi)
        yaw[active] = np.where(np.abs(heading) > np.pi / 2 + 1e-6, heading + half_turn, heading)

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
        # Aim a little past the contact point, on the cube's centre line.
        contact = cube - u * (CUBE_HALF + _PAD_HALF_THICKNESS)
        target[m, :2] = contact[m] + (self.push_lead(cube, u)[:, None] * u)[m]
        target[m, 2] = CUBE_HALF
        speed[m] = np.minimum(speed[m], 0.5)
        done_push = m & self.pushed_far_enough(cube, u)
        lost = m & (np.abs(lateral) > 0.025)

        m = active & (ph == self.P_BACK)
        early = m & (self.timer < 4)  # slide back 4 cm off the cube, then rise
        target[early, :2] = t.ee_target[early, :2] - 0.01 * u[early]
        target[early, 2] = CUBE_HALF
        target[m & ~early, 2] = 0.12

        for mask in (done_above, done_down, done_push):
            self.advance(mask)
        self.advance(lost, to=self.P_ABOVE)
