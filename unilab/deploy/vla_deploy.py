"""An exported VLA in the deploy loop: one robot's observation dict -> one action, with the
chunk executor of the torch-free runner (`n_act` actions per chunk, optional temporal
ensembling, the flow's noise drawn from a seed).

    policy = OnnxVLAPolicy("export/policy.onnx")
    step = VLAStepPolicy(policy, robot, seed=0)
    run_deploy(step, robot, obs_group="policy", ..., full_observation=True)

A robot that reports finished episodes (`SimRobot.episode_returns`: the simulated task
auto-resets) makes the executor re-plan at once in the new episode, as play and eval do;
a real robot runs one continuous episode. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy


class VLAStepPolicy:
    def __init__(
        self,
        policy: OnnxVLAPolicy,
        robot: Any = None,
        *,
        seed: int = 0,
        n_act: int | None = None,
        ensemble_decay: float | None = None,
    ) -> None:
        self.policy = policy
        self.robot = robot
        self.executor = policy.executor(
            num_envs=1, seed=seed, n_act=n_act, ensemble_decay=ensemble_decay
        )
        self.keys = [*policy.obs_keys, *policy.condition_keys]
        self._episodes = self._finished()

    def _finished(self) -> int:
        return len(getattr(self.robot, "episode_returns", None) or ())

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """(action_dim,) float32 for one robot's observation groups."""
        finished = self._finished()
        if finished != self._episodes:  # the robot started a new episode
            self.executor.reset()
            self._episodes = finished
        batch = {k: np.asarray(obs[k])[None] for k in self.keys if k in obs}
        return self.executor(batch)[0]
