"""A small untrained VLA run directory (bc_flow config, one checkpoint), built in-process for
the inference-tuning and alert tests: loading, export, eval and play read it like a trained
run; training it would cost minutes these tests do not need."""

from __future__ import annotations

from pathlib import Path

import torch

from unilab.algos.build import build_policy
from unilab.config import compose
from unilab.config.compose import to_yaml
from unilab.tasks.registry import make_task
from unilab.train.checkpoint import rng_state, save_checkpoint
from unilab.train.run_dir import new_run_dir

VLA_TASK = [
    "task=arm_move_side",
    "task.state_policy=true",
    "task.cameras=[]",
    "task.episode_length_s=1.0",
]
TINY_VLA = [
    "algo=bc_flow",
    "algo.model.width=32",
    "algo.model.heads=2",
    "algo.model.horizon=8",
    "algo.model.n_act=4",
    "algo.model.num_steps=2",
    "algo.model.prefix_layers=1",
    "algo.model.expert_layers=1",
]


def vla_run(out: Path, *extra: str, seed: int = 0) -> Path:
    """A run directory of an untrained tiny VLA (`extra`: more config overrides, e.g.
    `algo.model.value_heads=true`); returns its path."""
    torch.manual_seed(seed)
    cfg = compose([*VLA_TASK, *TINY_VLA, *extra, f"run.out_dir={out}", f"run.seed={seed}"])
    task = make_task(cfg.task, num_envs=1, seed=seed, sim_cfg=cfg.sim)
    actor = build_policy(cfg.algo, task)
    task.close()
    run = new_run_dir(cfg)
    save_checkpoint(
        run.checkpoints,
        1,
        {
            "iteration": 1,
            "env_steps": 0,
            "algo": {"actor": actor.state_dict()},
            "rng": rng_state(),
            "config": to_yaml(cfg),
            "metadata_task": cfg.task.name,
        },
    )
    return run.path
