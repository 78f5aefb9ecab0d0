"""Arm move to a side: bring the named cube to a named side of the table (left, right or
far), among distractor cubes. Ways to succeed: slide it there with the closed fingers, or
pick it up and carry it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from unilab.tasks.instructions import InstructionTemplates
from unilab.tasks.registry import register_task
from unilab.tasks.tabletop import TabletopConfig, TabletopTask
from unilab.tasks.tabletop_geometry import pick_off_path
from unilab.tasks.tabletop_scene import COLOUR_NAMES, SceneLayout

SIDES = ("left", "right", "far")
"""Sides as seen from the robot: left is +y, right -y, far is away from the base (+x)."""
SIDE_DIRECTION = np.array([[0.0, 1.0], [0.0, -1.0], [1.0, 0.0]])
"""Unit direction (x, y) from the workspace centre toward each side."""

TEMPLATES = InstructionTemplates(
    templates=(
        "move the {colour} cube to the {side} side of the table",
        "get the {colour} block over to the {side} side",
        "bring the {colour} cube to the {side} of the table",
    ),
    slots={"colour": COLOUR_NAMES, "side": SIDES},
)


@dataclass
class ArmMoveSideConfig(TabletopConfig):
    name: str = "arm_move_side"
    num_distractors: int = 2
    """Cubes besides the named one."""
    cube_low: list[float] = field(default_factory=lambda: [0.44, -0.05])
    """Lower corner (x, y in m) of the area the named cube starts in."""
    cube_high: list[float] = field(default_factory=lambda: [0.54, 0.05])
    """Upper corner of the named cube's start area."""
    side_lines: list[float] = field(default_factory=lambda: [0.18, -0.18, 0.64])
    """Where each side begins (m): y > left, y < right, x > far."""


@register_task("arm_move_side", ArmMoveSideConfig, default_algo="bc_flow")
class ArmMoveSide(TabletopTask):
    """Move the named cube to the left, right or far side of the table (slide or carry)."""

    layout: ClassVar[SceneLayout] = SceneLayout()
    templates: ClassVar[InstructionTemplates] = TEMPLATES
    state_attrs: ClassVar[tuple[str, ...]] = (*TabletopTask.state_attrs, "side")
    cfg: ArmMoveSideConfig

    def __init__(self, cfg: ArmMoveSideConfig, **kwargs: object) -> None:
        if len(cfg.side_lines) != 3:
            raise ValueError(f"task {cfg.name!r}: side_lines needs 3 numbers (left, right, far)")
        super().__init__(cfg, **kwargs)
        self.side = np.zeros(self.num_envs, dtype=np.int64)
        """(n,) index into SIDES of each env's instruction."""

    def sample_episode(self, ids: np.ndarray, qpos: np.ndarray) -> None:
        cfg, k, rng = self.cfg, len(ids), self.rng
        if not hasattr(self, "side"):  # the first reset runs inside Task.__init__
            self.side = np.zeros(self.num_envs, dtype=np.int64)
        side = rng.integers(0, len(SIDES), k)
        self.side[ids] = side
        cube = rng.uniform(cfg.cube_low, cfg.cube_high, (k, 2))
        self.set_cube_poses(qpos, 0, cube, rng.uniform(-np.pi / 4, np.pi / 4, k))
        u = SIDE_DIRECTION[side]
        placed = cube[:, None]
        for c in range(1, self.num_cubes):
            cand = rng.uniform([0.35, -0.3], [0.68, 0.3], (k, 64, 2))
            outside = ~self._in_side(cand, side[:, None], margin=0.06)
            xy = pick_off_path(cand, cube, u, placed, allowed=outside)
            placed = np.concatenate([placed, xy[:, None]], axis=1)
            self.set_cube_poses(qpos, c, xy, rng.uniform(-np.pi / 4, np.pi / 4, k))

    def _in_side(self, xy: np.ndarray, side: np.ndarray, margin: float = 0.0) -> np.ndarray:
        """Whether points xy (..., 2) lie on side (broadcast), margin m before the line."""
        left, right, far = self.cfg.side_lines
        x, y = xy[..., 0], xy[..., 1]
        return np.select(
            [side == 0, side == 1, side == 2],
            [y > left - margin, y < right + margin, x > far - margin],
        )

    def instruction_values(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {"colour": self.cube_colour[ids, 0], "side": self.side[ids]}

    def success(self) -> np.ndarray:
        cube = self.cube_pos[:, 0]
        on_table = cube[:, 2] < 0.04
        return self._in_side(cube[:, :2], self.side) & on_table & self.settled(0)

    def success_from_state(self, state: np.ndarray) -> np.ndarray:
        """`success` from critic vectors: the named cube on the table, on the named side,
        slower than 5 cm/s. (Whether the hand still touches it is not in the state.)"""
        parts = self.critic_parts(state)
        cube, side = parts["cube_pos"][:, 0], parts["task_state"][:, : len(SIDES)].argmax(1)
        still = np.linalg.norm(parts["cube_vel"][:, 0], axis=1) < 0.05
        return self._in_side(cube[:, :2], side).astype(bool) & (cube[:, 2] < 0.04) & still

    def object_and_goal(self) -> tuple[np.ndarray, np.ndarray]:
        cube = self.cube_pos[:, 0]
        goal = cube.copy()
        left, right, far = self.cfg.side_lines
        line = np.array([left + 0.05, right - 0.05, far + 0.05])[self.side]
        axis = np.where(self.side == 2, 0, 1)
        goal[np.arange(self.num_envs), axis] = line
        return cube, goal

    def task_state(self) -> list[np.ndarray]:
        return [np.eye(len(SIDES), dtype=np.float32)[self.side]]
