"""Arm around an obstacle: carry the named cube past a wall to a coloured goal disc, among
distractor cubes. The wall stands between the cube and the goal, centred on the line
between them, so going left and going right around it are mirror-image ways to succeed
(the clean two-mode case where averaging the two, as a regression policy does, drives the
cube into the wall)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from unilab.tasks.instructions import InstructionTemplates
from unilab.tasks.registry import register_task
from unilab.tasks.tabletop_goal import GoalDiscConfig, GoalDiscTask
from unilab.tasks.tabletop_scene import COLOUR_NAMES, SceneLayout

TEMPLATES = InstructionTemplates(
    templates=(
        "move the {colour} cube around the wall onto the {target} circle",
        "carry the {colour} block past the wall to the {target} mark",
        "take the {colour} cube around the barrier and put it on the {target} disc",
    ),
    slots={"colour": COLOUR_NAMES, "target": COLOUR_NAMES},
)


@dataclass
class ArmAroundObstacleConfig(GoalDiscConfig):
    name: str = "arm_around_obstacle"
    num_distractors: int = 1
    """Cubes besides the named one (placed well off to the sides)."""
    cube_x: list[float] = field(default_factory=lambda: [0.3, 0.35])
    """Range (m) of the named cube's start x (toward the base from the wall)."""
    wall_x: list[float] = field(default_factory=lambda: [0.44, 0.48])
    """Range (m) of the wall's x."""
    goal_x: list[float] = field(default_factory=lambda: [0.64, 0.68])
    """Range (m) of the goal's x (beyond the wall)."""
    lateral: float = 0.03
    """The cube, the wall and the goal are each shifted sideways by up to +- this (m)."""
    wall_offset: float = 0.0
    """The wall's centre is shifted this far (m, + is left) off the cube-goal line. At 0 the
    two ways around it are mirror images; a shift makes the way past its far end longer."""


@register_task("arm_around_obstacle", ArmAroundObstacleConfig, default_algo="bc_flow")
class ArmAroundObstacle(GoalDiscTask):
    """Carry the named cube around a wall onto the goal disc (left or right of the wall)."""

    layout: ClassVar[SceneLayout] = SceneLayout(wall=True, goal_marker=True)
    templates: ClassVar[InstructionTemplates] = TEMPLATES
    cfg: ArmAroundObstacleConfig

    def sample_episode(self, ids: np.ndarray, qpos: np.ndarray) -> None:
        cfg, k, rng = self.cfg, len(ids), self.rng
        lat = cfg.lateral

        def point(x_range: list[float]) -> np.ndarray:
            x = rng.uniform(x_range[0], x_range[1], k)
            return np.stack([x, rng.uniform(-lat, lat, k)], axis=1)

        cube, self._wall, self._goal = point(cfg.cube_x), point(cfg.wall_x), point(cfg.goal_x)
        self._wall[:, 1] += cfg.wall_offset
        self.set_cube_poses(qpos, 0, cube, rng.uniform(-np.pi / 4, np.pi / 4, k))
        for c in range(1, self.num_cubes):
            side = np.where(rng.random(k) < 0.5, 1.0, -1.0)
            y = side * rng.uniform(0.3, 0.36, k)
            # Several distractors take turns along x so that they never overlap.
            x = 0.3 + 0.1 * ((c - 1) % 4) + rng.uniform(0.0, 0.04, k)
            self.set_cube_poses(
                qpos, c, np.stack([x, y], axis=1), rng.uniform(-np.pi / 4, np.pi / 4, k)
            )

    def place_mocap(self, ids: np.ndarray) -> None:
        self.set_mocap(ids, "wall", self._wall)
        self.set_mocap(ids, "goal", self._goal)

    def instruction_values(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {"colour": self.cube_colour[ids, 0], "target": self.extra_colour[ids, -1]}

    @property
    def wall_pos(self) -> np.ndarray:
        return self.mocap_position("wall")
