"""The worker side of `unilab collect`: a tabletop task and its scripted expert in a worker
process, writing T steps of every env into a ring slot per chunk.

The supervisor starts `collect_worker_main` by its path (`WORKER_TARGET`). Every episode
draws its start state and the expert's mode and noise from its own seed (the task's
`episode_seeder`), so a stored episode depends only on its seed. Seeds are unique per
run: worker w of W takes `seed_start + W * (GENERATION_STRIDE * generation + j) + w` for
its j-th episode, so a restarted worker (generation + 1) never repeats one.

Frame t of an env in a chunk is what the store keeps: the observation the expert acted
on, its action (the clean one where `action_noise` perturbs what is executed), the reward and end flags of the step, plus the episode's seed, mode and
instruction index and the task's success flag at that step (the main process keeps or
drops an episode by the success flag of its last frame).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import numpy as np

from unilab.runtime.fields import FieldSpecs, obs_group_of
from unilab.runtime.worker_base import WorkerContext
from unilab.tasks.experts.base import ScriptedExpert
from unilab.tasks.tabletop import TabletopTask

WORKER_TARGET = "unilab.data.collect_worker:collect_worker_main"
GENERATION_STRIDE = 1 << 24
"""Seeds per worker generation: a replacement worker starts past every seed of the last."""

EPISODE_FIELDS: FieldSpecs = {
    "action": ((5,), "float32"),
    "reward": ((), "float32"),
    "terminated": ((), "bool"),
    "truncated": ((), "bool"),
    "success": ((), "bool"),
    "seed": ((), "int64"),
    "mode": ((), "int32"),
    "instruction_index": ((), "int64"),
}
"""Per-step chunk fields besides the observations (action width set by the main process)."""


class SeedAllocator:
    """Unique episode seeds of one worker process (see the module doc)."""

    def __init__(self, start: int, num_workers: int, worker_id: int, generation: int) -> None:
        self.start, self.stride = int(start), int(num_workers)
        self.offset = int(worker_id)
        self.next_index = GENERATION_STRIDE * int(generation)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        j = self.next_index + np.arange(len(ids), dtype=np.int64)
        self.next_index += len(ids)
        return self.start + self.stride * j + self.offset


def collect_worker_main(ctx: WorkerContext) -> None:
    # Mesa's llvmpipe reads this when the GL context is made: one rasterizer thread per
    # worker, as torch gets one thread (the workers already use every core).
    os.environ.setdefault("LP_NUM_THREADS", "1")
    # The task and sim sections only: `compose` would import the algorithms (and torch).
    from unilab.deploy.sim_task import make_task_from_dicts
    from unilab.tasks.experts import make_expert

    task = make_task_from_dicts(
        ctx.config["task"], ctx.config["sim"], num_envs=ctx.num_envs, seed=ctx.seed
    )
    if not isinstance(task, TabletopTask):
        raise TypeError(f"task {task.cfg.name!r} is not a tabletop task: no scripted expert")
    task.episode_seeder = SeedAllocator(
        ctx.config["seed_start"], ctx.config["num_workers"], ctx.worker_id, ctx.generation
    )
    expert = make_expert(
        task,
        seed=ctx.seed,
        action_noise=ctx.config.get("action_noise", 0.0),
        mode_probs=ctx.config.get("mode_probs"),
    )
    try:
        run_collect_worker(ctx, task, expert)
    finally:
        task.close()


def run_collect_worker(ctx: WorkerContext, task: TabletopTask, expert: ScriptedExpert) -> None:
    """Fill ring slots with the expert's steps until the run stops (StopRequested)."""
    assert ctx.ring is not None
    obs = task.reset()
    expert.reset(None, seeds=task.episode_seed)
    seq, steps = 0, 0
    while True:
        slot = ctx.acquire_slot()
        views = ctx.ring.views(slot)
        obs = fill_chunk(task, expert, views, obs, ctx.stepped)
        steps += views["action"].shape[0] * task.num_envs
        ctx.ring.publish(slot, seq=seq, policy_version=0, step_count=steps)
        seq += 1


def fill_chunk(
    task: TabletopTask,
    expert: ScriptedExpert,
    out: Mapping[str, np.ndarray],
    obs: dict[str, np.ndarray],
    on_step: Callable[[], None] | None = None,
) -> dict[str, np.ndarray]:
    """T = out['action'].shape[0] expert steps into `out` (each (T, n, ...)); returns the
    observation to continue from. Ended episodes restart with their next seed."""
    obs_fields = {name: g for name in out if (g := obs_group_of(name)) is not None}
    for t in range(out["action"].shape[0]):
        for name, group in obs_fields.items():
            out[name][t] = obs[group]
        out["seed"][t] = task.episode_seed
        out["mode"][t] = expert.mode
        out["instruction_index"][t] = task.instruction_index
        action = expert.act()
        result = task.step(expert.perturb(action))
        out["action"][t] = action
        if "perturbed" in out:
            out["perturbed"][t] = expert.perturbed
        out["reward"][t] = result.reward
        out["terminated"][t] = result.terminated
        out["truncated"][t] = result.truncated
        out["success"][t] = result.extras["success"] > 0.5
        ended = np.flatnonzero(result.terminated | result.truncated)
        if ended.size:
            expert.reset(ended, seeds=task.episode_seed[ended])
        obs = result.obs
        if on_step is not None:
            on_step()
    return obs
