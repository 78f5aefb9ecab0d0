"""Record the episodes of `unilab play ... record=<store>` into an episode store.

Each frame holds the task's observation groups (float vectors and token ids as
`obs/<group>`, camera images as `images/<cam>`; depth is left out), the action, the reward
and the end flags; an env's episode is appended (atomically) when it ends, with the task's
`success` metric at its last step as the episode's `success` metadata (when the task has
one: value-head targets and `awr_flow` advantages read it). Episodes still running when
play stops are not recorded.

With a takeover (`intervention` given), the frames a takeover drove are marked
`is_intervention`, and an episode with any such frame is stored as a *policy* failure
(`success` False; the task's own outcome, the rescue, in `tags["task_success"]`, and
`tags["intervened"]` True): its policy frames led to the takeover, so advantages and
success heads must not credit them with the expert's rescue.

With `scene` given (a play that records each env's first episode only), every episode is
tagged `tags["scene"] = "<scene>/env=<slot>"`: plays with the same seed, env count and task
start each slot from the same scene, so repeated plays give groups of episodes whose
outcomes differ only by the policy's own randomness (group baselines for advantages).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from unilab.data.schema import (
    INTERVENED_TAG,
    SCENE_TAG,
    TASK_SUCCESS_TAG,
    FieldSpec,
    StoreSchema,
)
from unilab.data.store import EpisodeStore
from unilab.data.writer import EpisodeWriter


class PlayRecorder:
    def __init__(
        self,
        path: str | Path,
        obs_spec: dict[str, tuple[tuple[int, ...], str]],
        action_dim: int,
        num_envs: int,
        fps: float,
        meta: dict[str, Any],
        policy_version: int = 0,
        scene: str | None = None,
    ) -> None:
        self.fields = store_fields(obs_spec)
        """Observation group -> store field."""
        user = {self.fields[g]: FieldSpec(*obs_spec[g]) for g in self.fields}
        user["action"] = FieldSpec((action_dim,), "float32")
        schema = StoreSchema(user)
        self.store = EpisodeStore.open(path, "a", schema=schema)
        self.writer = EpisodeWriter(
            self.store, num_envs, origin="sim", default_meta={"fps": fps, **meta}
        )
        self.policy_version = policy_version
        self.scene = scene
        self.episodes: list[int] = []
        self._intervened = np.zeros(num_envs, dtype=bool)

    def add(
        self,
        obs: dict[str, np.ndarray],
        actions: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        success: np.ndarray | None = None,
        intervention: np.ndarray | None = None,
        keep: np.ndarray | None = None,
    ) -> None:
        """One step of every env; `success` (n_envs,) the task's success metric, read at
        the steps where an env's episode ends; `intervention` (n_envs,) bool: the envs whose
        action a takeover chose (see the module doc); `keep` (n_envs,) bool: an episode
        that ends where it is False is dropped, not stored."""
        if intervention is not None:
            self._intervened |= np.asarray(intervention, dtype=bool)
        ended = np.flatnonzero(np.asarray(terminated) | np.asarray(truncated))
        for env in ended:
            task_success = None if success is None else bool(np.asarray(success)[env] > 0.5)
            meta = self.writer.default_meta
            if self._intervened[env]:
                tags = {**meta.tags, INTERVENED_TAG: True, TASK_SUCCESS_TAG: task_success}
                meta = dataclasses.replace(meta, success=False, tags=tags)
            elif task_success is not None:
                meta = dataclasses.replace(meta, success=task_success)
            if self.scene is not None:
                tags = {**meta.tags, SCENE_TAG: f"{self.scene}/env={int(env)}"}
                meta = dataclasses.replace(meta, tags=tags)
            if meta is not self.writer.default_meta:
                self.writer.set_meta(int(env), meta)
        frames: dict[str, Any] = {name: obs[g] for g, name in self.fields.items()}
        frames.update(
            action=actions,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            policy_version=np.full(len(reward), self.policy_version, np.int64),
        )
        if intervention is not None:
            frames["is_intervention"] = np.asarray(intervention, dtype=bool)
        self.episodes += self.writer.add_step(frames, keep=keep)
        self._intervened[ended] = False

    def close(self) -> list[int]:
        """Commit finished episodes, drop unfinished ones; returns the recorded indices."""
        self.episodes += self.writer.flush()
        self.writer.close(keep_partial=False)
        self.store.close()
        return self.episodes


def store_fields(obs_spec: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, str]:
    """Observation group -> store field: images/<cam> (uint8 H x W x 3) stay images/<cam>,
    other groups become obs/<group>; depth/<cam> groups are not stored."""
    fields = {}
    for group in obs_spec:
        if group.startswith("depth/"):
            continue
        if group.startswith("images/"):
            fields[group] = group
        else:
            fields[group] = f"obs/{group}"
    return fields
