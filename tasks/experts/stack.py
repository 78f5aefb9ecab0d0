"""Expert for arm_stack: modes = which named cube goes on top x which pair of its faces
the fingers close on."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from unilab.tasks.arm_stack import ArmStack
from unilab.tasks.experts.base import PickPlaceExpert, register_expert
from unilab.tasks.tabletop_scene import CUBE_HALF


@register_expert("arm_stack")
class StackExpert(PickPlaceExpert):
    mode_names: ClassVar[tuple[str, ...]] = (
        "first on second, small turn",
        "first on second, large turn",
        "second on first, small turn",
        "second on first, large turn",
    )
    task: ArmStack

    def on_reset(self, ids: np.ndarray) -> None:
        super().on_reset(ids)
        self.pick[ids] = self.mode[ids] // 2
        self.turn[ids] = self.mode[ids] % 2

    def place_target(self) -> tuple[np.ndarray, np.ndarray]:
        bottom = self.task.cube_pos[np.arange(self.num_envs), 1 - self.pick]
        # Fingertips at the top cube's centre, released 6 mm above resting height.
        return bottom[:, :2], bottom[:, 2] + 2 * CUBE_HALF + 0.006
