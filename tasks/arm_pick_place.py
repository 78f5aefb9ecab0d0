"""Arm pick and place: put the named cube into either of two bowls (left or right of the
workspace), among distractor cubes. Ways to succeed: which bowl, and how the hand turns to
grasp (a cube can be taken across either pair of faces)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from unilab.tasks.instructions import InstructionTemplates
from unilab.tasks.registry import register_task
from unilab.tasks.tabletop import TabletopConfig, TabletopTask
from unilab.tasks.tabletop_geometry import sample_separated
from unilab.tasks.tabletop_scene import BOWL_INNER_RADIUS, COLOUR_NAMES, SceneLayout, bowl_name

TEMPLATES = InstructionTemplates(
    templates=(
        "put the {colour} cube in a bowl",
        "place the {colour} block into one of the bowls",
        "pick up the {colour} cube and drop it in a bowl",
    ),
    slots={"colour": COLOUR_NAMES},
)


@dataclass
class ArmPickPlaceConfig(TabletopConfig):
    name: str = "arm_pick_place"
    num_distractors: int = 2
    """Cubes besides the named one."""
    cube_low: list[float] = field(default_factory=lambda: [0.4, -0.08])
    """Lower corner (x, y in m) of the area the cubes start in."""
    cube_high: list[float] = field(default_factory=lambda: [0.6, 0.08])
    """Upper corner of the cubes' area."""
    bowl_x: list[float] = field(default_factory=lambda: [0.42, 0.6])
    """Range (m) of each bowl's x; the left bowl's y is in bowl_y, the right one's in -bowl_y."""
    bowl_y: list[float] = field(default_factory=lambda: [0.2, 0.27])
    """Range (m) of the left bowl's y (the right bowl mirrors it)."""


@register_task("arm_pick_place", ArmPickPlaceConfig, default_algo="bc_flow")
class ArmPickPlace(TabletopTask):
    """Put the named cube into a bowl (two bowls, either counts), among distractor cubes."""

    layout: ClassVar[SceneLayout] = SceneLayout(num_bowls=2)
    templates: ClassVar[InstructionTemplates] = TEMPLATES
    cfg: ArmPickPlaceConfig

    def sample_episode(self, ids: np.ndarray, qpos: np.ndarray) -> None:
        cfg, k = self.cfg, len(ids)
        bx = self.rng.uniform(cfg.bowl_x[0], cfg.bowl_x[1], (k, 2))
        by = self.rng.uniform(cfg.bowl_y[0], cfg.bowl_y[1], (k, 2)) * np.array([1.0, -1.0])
        self._bowls = np.stack([bx, by], axis=-1)  # (k, 2 bowls, 2)
        placed = np.zeros((k, 0, 2))
        for cube in range(self.num_cubes):
            xy = sample_separated(
                self.rng, np.array(cfg.cube_low), np.array(cfg.cube_high), 0.08, placed
            )
            placed = np.concatenate([placed, xy[:, None]], axis=1)
            yaw = self.rng.uniform(-np.pi / 4, np.pi / 4, k)
            self.set_cube_poses(qpos, cube, xy, yaw)

    def place_mocap(self, ids: np.ndarray) -> None:
        for b in range(2):
            self.set_mocap(ids, bowl_name(b), self._bowls[:, b])

    def instruction_values(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {"colour": self.cube_colour[ids, 0]}

    @property
    def bowl_pos(self) -> np.ndarray:
        """(n, 2, 3) bowl positions (bowl0 on the left, +y; bowl1 on the right)."""
        return np.stack([self.mocap_position(bowl_name(b)) for b in range(2)], axis=1)

    def in_bowl(self) -> np.ndarray:
        """(n, 2) bool: the named cube rests inside each bowl."""
        cube = self.cube_pos[:, 0]
        horizontal = np.linalg.norm(cube[:, None, :2] - self.bowl_pos[:, :, :2], axis=2)
        inside = horizontal < BOWL_INNER_RADIUS - 0.015
        resting: np.ndarray = inside & (cube[:, None, 2] < 0.06) & self.settled(0)[:, None]
        return resting

    def success(self) -> np.ndarray:
        done: np.ndarray = np.any(self.in_bowl(), axis=1)
        return done

    def object_and_goal(self) -> tuple[np.ndarray, np.ndarray]:
        cube = self.cube_pos[:, 0]
        bowls = self.bowl_pos
        nearest = np.argmin(np.linalg.norm(bowls[:, :, :2] - cube[:, None, :2], axis=2), axis=1)
        goal = bowls[np.arange(self.num_envs), nearest] + np.array([0.0, 0.0, 0.03])
        return cube, goal

    def task_metrics(self) -> dict[str, np.ndarray]:
        inside = self.in_bowl()
        return {
            "success": np.any(inside, axis=1).astype(np.float32),
            "in_left_bowl": inside[:, 0].astype(np.float32),
            "in_right_bowl": inside[:, 1].astype(np.float32),
        }
