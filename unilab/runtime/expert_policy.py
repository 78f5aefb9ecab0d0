"""A scripted expert (`unilab.tasks.experts`) as a `Policy[np.ndarray]`, for play and eval.

The expert reads the task's privileged state itself, so it reads no observation group. It
starts each env's episode plan when that env's episode is at step 0 (after `task.reset()`
and every auto-reset), so it runs inside `rollout` like any other policy. The chunk's
extras carry the expert's `mode` per env.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from unilab.runtime.policy import ActionChunk
from unilab.tasks.experts.base import ScriptedExpert


class ExpertPolicy:
    """`Policy[np.ndarray]` over a ScriptedExpert bound to its task (H = 1)."""

    action_horizon = 1

    def __init__(self, expert: ScriptedExpert) -> None:
        self.expert = expert
        self.task = expert.task

    @property
    def obs_groups(self) -> tuple[str, ...]:
        return ()

    @property
    def action_dim(self) -> int:
        return int(self.task.action_dim)

    def act(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = False
    ) -> ActionChunk[np.ndarray]:
        starting = np.flatnonzero(self.task.episode_step == 0)
        if starting.size:
            self.expert.start(starting)
        actions = self.expert.act()[:, None, :]
        return ActionChunk(actions, None, {"mode": self.expert.mode.copy()})

    def act_inference(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.act(obs, deterministic=True).actions
