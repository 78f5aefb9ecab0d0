"""Arm stack: put one of two named cubes on top of the other, among distractor cubes.
Ways to succeed: which cube goes on top, and how the hand turns to grasp it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from unilab.tasks.instructions import InstructionTemplates
from unilab.tasks.registry import register_task
from unilab.tasks.tabletop import TabletopConfig, TabletopTask
from unilab.tasks.tabletop_geometry import sample_separated
from unilab.tasks.tabletop_scene import COLOUR_NAMES, CUBE_HALF, SceneLayout

TEMPLATES = InstructionTemplates(
    templates=(
        "stack the {colour} cube and the {other} cube",
        "put the {colour} and {other} blocks on top of each other",
        "build a tower from the {colour} cube and the {other} cube",
    ),
    slots={"colour": COLOUR_NAMES, "other": COLOUR_NAMES},
)


@dataclass
class ArmStackConfig(TabletopConfig):
    name: str = "arm_stack"
    num_distractors: int = 1
    """Cubes besides the two named ones."""
    cube_low: list[float] = field(default_factory=lambda: [0.38, -0.16])
    """Lower corner (x, y in m) of the area the cubes start in."""
    cube_high: list[float] = field(default_factory=lambda: [0.62, 0.16])
    """Upper corner of the cubes' area."""
    min_separation: float = 0.1
    """Least distance (m) between cube centres at the start."""


@register_task("arm_stack", ArmStackConfig, default_algo="bc_flow")
class ArmStack(TabletopTask):
    """Stack two named cubes, either one on top, among distractor cubes."""

    layout: ClassVar[SceneLayout] = SceneLayout()
    templates: ClassVar[InstructionTemplates] = TEMPLATES
    num_named: ClassVar[int] = 2
    cfg: ArmStackConfig

    def sample_episode(self, ids: np.ndarray, qpos: np.ndarray) -> None:
        cfg, k = self.cfg, len(ids)
        placed = np.zeros((k, 0, 2))
        low, high = np.array(cfg.cube_low), np.array(cfg.cube_high)
        for cube in range(self.num_cubes):
            xy = sample_separated(self.rng, low, high, cfg.min_separation, placed)
            placed = np.concatenate([placed, xy[:, None]], axis=1)
            self.set_cube_poses(qpos, cube, xy, self.rng.uniform(-np.pi / 4, np.pi / 4, k))

    def instruction_values(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {"colour": self.cube_colour[ids, 0], "other": self.cube_colour[ids, 1]}

    def stacked(self) -> np.ndarray:
        """(n, 2) bool: cube0 rests on cube1 (column 0) or cube1 on cube0 (column 1)."""
        a, b = self.cube_pos[:, 0], self.cube_pos[:, 1]
        out = []
        for top, bottom, top_id in ((a, b, 0), (b, a, 1)):
            aligned = np.linalg.norm(top[:, :2] - bottom[:, :2], axis=1) < 0.02
            height = top[:, 2] - bottom[:, 2]
            on = aligned & (np.abs(height - 2 * CUBE_HALF) < 0.01) & (bottom[:, 2] < 0.04)
            out.append(on & self.settled(top_id) & self.settled(1 - top_id))
        return np.stack(out, axis=1)

    def success(self) -> np.ndarray:
        done: np.ndarray = np.any(self.stacked(), axis=1)
        return done

    def object_and_goal(self) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.cube_pos[:, 0], self.cube_pos[:, 1]
        a_moves = (a[:, 2] >= b[:, 2])[:, None]
        obj = np.where(a_moves, a, b)
        goal = np.where(a_moves, b, a) + np.array([0.0, 0.0, 2 * CUBE_HALF])
        return obj, goal

    def task_metrics(self) -> dict[str, np.ndarray]:
        stacked = self.stacked()
        return {
            "success": np.any(stacked, axis=1).astype(np.float32),
            "first_on_second": stacked[:, 0].astype(np.float32),
            "second_on_first": stacked[:, 1].astype(np.float32),
        }
