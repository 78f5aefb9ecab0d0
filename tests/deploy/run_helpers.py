"""Run directories for the deploy tests, trained in-process (the runtime adds seconds of
process start-up that these tests do not need; tests/export builds one through `train`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from unilab.algos.registry import ALGORITHMS
from unilab.config import compose
from unilab.config.compose import to_yaml
from unilab.runtime.rollout import collect_chunk, start_rollout
from unilab.tasks.registry import make_task
from unilab.train.checkpoint import rng_state, save_checkpoint
from unilab.train.run_dir import RunDir, new_run_dir

CARTPOLE = ["task=cartpole_balance", "algo=ppo", "algo.actor_hidden=[64,64]"]


def trained_cartpole_run(out: Path, iterations: int, seed: int = 0) -> RunDir:
    """PPO on cart-pole for `iterations` chunks of 32 envs x 32 steps, saved as the training
    loop saves it (config.yaml + checkpoints/ckpt_*.pt with the same keys)."""
    torch.manual_seed(seed)
    cfg = compose([*CARTPOLE, f"run.out_dir={out}", f"run.seed={seed}", "sim.num_envs=32"])
    task = make_task(cfg.task, num_envs=32, seed=seed)
    cls = ALGORITHMS.get("ppo").algo_cls
    algo = cls(cfg.algo, task.obs_dims, task.action_dim, torch.device("cpu"))
    fields = cls.chunk_fields(task.obs_dims, task.action_dim)
    buf = {k: np.zeros((32, 32, *shape), dtype=dtype) for k, (shape, dtype) in fields.items()}
    state = start_rollout(task)
    for _ in range(iterations):
        collect_chunk(task, algo.actor, buf, state)
        algo.update({k: torch.from_numpy(v) for k, v in buf.items()})
    run = new_run_dir(cfg)
    save_checkpoint(
        run.checkpoints,
        iterations,
        {
            "iteration": iterations,
            "env_steps": state.env_steps,
            "algo": algo.state_dict(),
            "rng": rng_state(),
            "config": to_yaml(cfg),
            "metadata_task": cfg.task.name,
        },
    )
    return run
