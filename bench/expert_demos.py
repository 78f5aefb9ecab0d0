"""Expert demonstrations of a tabletop task in an episode store, for imitation learning.

    write_expert_store("demos.zarr", "arm_move_side", episodes=60,
                       overrides=["task.cameras=[front]", "task.image_size=32"])

The scripted expert of the task (`unilab.tasks.experts`) drives a batch of envs; each step
is written through `unilab.data.EpisodeWriter` with the field names the VLA learners read:
`obs/policy` (proprioception), `obs/instruction` (word ids), `images/<camera>` (uint8) and
`action` (the expert's action), plus reward and the end flags. Only episodes the expert
solved are kept (the others are discarded in the writer); each carries its instruction
text, the seed, `success` and the expert's strategy (`tags.mode`) in its metadata.

The tests use it for tiny stores (a few episodes, one 32-pixel camera) and `unilab bench
learn_vla` for real ones. `unilab collect` (the data tools) records the same names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unilab.config.compose import compose
from unilab.data import EpisodeStore, EpisodeWriter, FieldSpec, StoreSchema
from unilab.tasks.base import IMAGE_PREFIX, INSTRUCTION
from unilab.tasks.experts import make_expert
from unilab.tasks.registry import make_task
from unilab.tasks.tabletop import TabletopTask


@dataclass
class ExpertStoreReport:
    path: Path
    episodes: int
    frames: int
    attempts: int
    """Episodes the expert ran (solved or not) to get `episodes` solved ones."""
    seconds: float
    cameras: list[str]
    image_size: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "episodes": self.episodes,
            "frames": self.frames,
            "attempts": self.attempts,
            "expert_success": self.episodes / max(self.attempts, 1),
            "seconds": self.seconds,
            "cameras": self.cameras,
            "image_size": self.image_size,
        }


def expert_schema(task: TabletopTask) -> StoreSchema:
    spec = task.observation_spec()
    images = {
        k.removeprefix(IMAGE_PREFIX): tuple(v.shape)
        for k, v in spec.items()
        if k.startswith(IMAGE_PREFIX)
    }
    return StoreSchema.build(
        obs={"policy": spec["policy"].shape},
        action=task.action_dim,
        images=images,  # type: ignore[arg-type]
        extra={"obs/instruction": FieldSpec(tuple(spec[INSTRUCTION].shape), "int64")},
    )


def write_expert_store(
    path: str | Path,
    task_name: str,
    episodes: int,
    *,
    overrides: list[str] | tuple[str, ...] = (),
    seed: int = 0,
    num_envs: int = 16,
    max_attempts: int | None = None,
) -> ExpertStoreReport:
    """Record `episodes` solved expert episodes of `task_name` (with its config `overrides`,
    e.g. task.cameras=[front]) into a new store at `path` (replacing one there)."""
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be at least 1")
    t0 = time.perf_counter()
    cfg = compose([f"task={task_name}", *overrides])
    envs = max(1, min(num_envs, episodes))
    task = make_task(cfg.task, num_envs=envs, seed=seed, sim_cfg=cfg.sim)
    if not isinstance(task, TabletopTask):
        raise ValueError(f"task {task_name!r} has no scripted expert (the tabletop family has)")
    expert = make_expert(task, seed=seed)
    cams = [k for k in task.observation_spec() if k.startswith(IMAGE_PREFIX)]
    limit = max_attempts if max_attempts is not None else 3 * episodes + envs
    attempts = 0
    store = EpisodeStore.create(path, expert_schema(task), overwrite=True)
    meta = {"task": task_name, "robot": task.robot.name, "fps": 1.0 / task.control_dt}
    try:
        writer = EpisodeWriter(store, envs, origin="sim", default_meta=meta)
        obs = task.reset()
        expert.reset()

        def label(ids: np.ndarray) -> None:
            texts = task.instruction_text(ids)
            for env, text in zip(ids.tolist(), texts, strict=True):
                writer.set_meta(
                    env,
                    {
                        **meta,
                        "language_instruction": text,
                        "seed": seed,
                        "success": True,
                        "tags": {"mode": expert.mode_names[int(expert.mode[env])]},
                    },
                )

        label(np.arange(envs))
        while writer.episodes_written < episodes and attempts < limit:
            actions = expert.act()
            out = task.step(actions)
            ended = out.terminated | out.truncated
            solved = out.extras["success"] > 0.5
            keep = ended & solved
            room = episodes - writer.episodes_written
            for env in np.flatnonzero(keep)[room:]:  # more than needed ended at once
                keep[env] = False
            drop = ended & ~keep
            frame = {
                "obs/policy": obs["policy"],
                "obs/instruction": obs[INSTRUCTION],
                "action": actions,
                "reward": out.reward,
                "terminated": out.terminated & keep,
                "truncated": out.truncated & keep,
                **{k: obs[k] for k in cams},
            }
            writer.add_step(frame)
            if drop.any():
                writer.discard(np.flatnonzero(drop))
            done = np.flatnonzero(ended)
            attempts += done.size
            if done.size:
                expert.reset(done)
                label(done)
            obs = out.obs
        writer.close()
        written, frames = writer.episodes_written, writer.frames_written
    finally:
        store.close()
    if written < episodes:
        raise RuntimeError(
            f"the {task_name} expert solved only {written} of {attempts} episodes "
            f"(wanted {episodes})"
        )
    size = int(getattr(cfg.task, "image_size", 0))
    return ExpertStoreReport(
        Path(path),
        written,
        frames,
        attempts,
        time.perf_counter() - t0,
        [c.removeprefix(IMAGE_PREFIX) for c in cams],
        size,
    )
