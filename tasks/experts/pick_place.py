"""Expert for arm_pick_place: modes = which bowl (left, right) x which pair of cube faces
the fingers close on (small or large wrist turn)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from unilab.tasks.arm_pick_place import ArmPickPlace
from unilab.tasks.experts.base import PickPlaceExpert, register_expert


@register_expert("arm_pick_place")
class PickPlaceBowlExpert(PickPlaceExpert):
    mode_names: ClassVar[tuple[str, ...]] = (
        "left bowl, small turn",
        "left bowl, large turn",
        "right bowl, small turn",
        "right bowl, large turn",
    )
    task: ArmPickPlace

    def __init__(self, task: ArmPickPlace, seed: int = 0) -> None:
        self.offset = np.zeros((task.num_envs, 2))
        """Where to let go relative to the bowl's centre, varying per episode."""
        super().__init__(task, seed)

    def on_reset(self, ids: np.ndarray) -> None:
        super().on_reset(ids)
        self.pick[ids] = 0
        self.turn[ids] = self.mode[ids] % 2
        self.offset[ids] = self.rng.uniform(-0.012, 0.012, (ids.size, 2))

    def place_target(self) -> tuple[np.ndarray, np.ndarray]:
        bowl = self.mode // 2
        xy = self.task.bowl_pos[np.arange(self.num_envs), bowl, :2] + self.offset
        return xy, np.full(self.num_envs, 0.07)
