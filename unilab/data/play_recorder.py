"""Record the episodes of `unilab play ... record=<store>` into an episode store.

Each frame holds the observation groups the policy acted on, the action, the reward and
the end flags; an env's episode is appended (atomically) when it ends. Episodes still
running when play stops are not recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from unilab.data.schema import StoreSchema
from unilab.data.store import EpisodeStore
from unilab.data.writer import EpisodeWriter


class PlayRecorder:
    def __init__(
        self,
        path: str | Path,
        obs_dims: dict[str, int],
        action_dim: int,
        num_envs: int,
        fps: float,
        meta: dict[str, Any],
        policy_version: int = 0,
    ) -> None:
        schema = StoreSchema.build(obs=obs_dims, action=action_dim)
        self.store = EpisodeStore.open(path, "a", schema=schema)
        self.writer = EpisodeWriter(
            self.store, num_envs, origin="sim", default_meta={"fps": fps, **meta}
        )
        self.policy_version = policy_version
        self.episodes: list[int] = []

    def add(
        self,
        obs: dict[str, np.ndarray],
        actions: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        frames: dict[str, Any] = {f"obs/{g}": v for g, v in obs.items()}
        frames.update(
            action=actions,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            policy_version=np.full(len(reward), self.policy_version, np.int64),
        )
        self.episodes += self.writer.add_step(frames)

    def close(self) -> list[int]:
        """Commit finished episodes, drop unfinished ones; returns the recorded indices."""
        self.episodes += self.writer.flush()
        self.writer.close(keep_partial=False)
        self.store.close()
        return self.episodes
