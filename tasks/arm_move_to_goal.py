"""Arm move to a goal: bring the named cube onto a coloured goal disc, among distractor
cubes. The disc lies 14-20 cm from the cube, away from the robot or to a side. Ways to
succeed: slide the cube there with the closed fingers, or pick it up and carry it. Unlike
arm_move_side (anywhere past a line), the push has to end within the disc's 4 cm, so the two
ways differ in how much precision they ask of a policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from unilab.tasks.instructions import InstructionTemplates
from unilab.tasks.registry import register_task
from unilab.tasks.tabletop_geometry import pick_off_path
from unilab.tasks.tabletop_goal import GoalDiscConfig, GoalDiscTask
from unilab.tasks.tabletop_scene import COLOUR_NAMES, SceneLayout

TEMPLATES = InstructionTemplates(
    templates=(
        "move the {colour} cube onto the {target} circle",
        "bring the {colour} block to the {target} mark",
        "put the {colour} cube on the {target} disc",
    ),
    slots={"colour": COLOUR_NAMES, "target": COLOUR_NAMES},
)


@dataclass
class ArmMoveToGoalConfig(GoalDiscConfig):
    name: str = "arm_move_to_goal"
    num_distractors: int = 2
    """Cubes besides the named one (placed off the cube's way to the goal)."""
    cube_low: list[float] = field(default_factory=lambda: [0.40, -0.06])
    """Lower corner (x, y in m) of the area the named cube starts in."""
    cube_high: list[float] = field(default_factory=lambda: [0.50, 0.06])
    """Upper corner of the named cube's start area."""
    goal_distance: list[float] = field(default_factory=lambda: [0.14, 0.20])
    """Range (m) of the goal's distance from the cube's start."""
    goal_bearing: float = 1.57
    """The goal's direction from the cube is within +- this (rad) of straight away from the
    robot (+x): 1.57 reaches the sides, never back toward the base."""


@register_task("arm_move_to_goal", ArmMoveToGoalConfig, default_algo="bc_flow")
class ArmMoveToGoal(GoalDiscTask):
    """Move the named cube onto the goal disc (slide or carry)."""

    layout: ClassVar[SceneLayout] = SceneLayout(goal_marker=True)
    templates: ClassVar[InstructionTemplates] = TEMPLATES
    cfg: ArmMoveToGoalConfig

    def sample_episode(self, ids: np.ndarray, qpos: np.ndarray) -> None:
        cfg, k, rng = self.cfg, len(ids), self.rng
        cube = rng.uniform(cfg.cube_low, cfg.cube_high, (k, 2))
        self.set_cube_poses(qpos, 0, cube, rng.uniform(-np.pi / 4, np.pi / 4, k))
        bearing = rng.uniform(-cfg.goal_bearing, cfg.goal_bearing, k)
        u = np.stack([np.cos(bearing), np.sin(bearing)], axis=1)
        distance = rng.uniform(cfg.goal_distance[0], cfg.goal_distance[1], k)
        self._goal = cube + u * distance[:, None]
        placed = np.stack([cube, self._goal], axis=1)
        for c in range(1, self.num_cubes):
            cand = rng.uniform([0.32, -0.3], [0.7, 0.3], (k, 64, 2))
            xy = pick_off_path(cand, cube, u, placed, length=distance)
            placed = np.concatenate([placed, xy[:, None]], axis=1)
            self.set_cube_poses(qpos, c, xy, rng.uniform(-np.pi / 4, np.pi / 4, k))

    def place_mocap(self, ids: np.ndarray) -> None:
        self.set_mocap(ids, "goal", self._goal)

    def instruction_values(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {"colour": self.cube_colour[ids, 0], "target": self.extra_colour[ids, -1]}
