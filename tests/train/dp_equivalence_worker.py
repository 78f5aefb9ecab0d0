"""Run under torchrun: PPO updates on this rank's shard of fixed batches; rank 0 saves the
parameters. `python dp_equivalence_worker.py OUT.npz UPDATES` (one process) is the reference
on the combined batch."""

from __future__ import annotations

import sys

import numpy as np
import torch

from unilab.algos.ppo import PPO, PPOConfig
from unilab.train.distributed import World, end_process_after_group, init_world

STEPS, ENVS, OBS, ACT = 8, 12, 5, 2
"""A combined batch: 8 steps of 12 envs (6 per rank with 2 ranks)."""


def combined_batch(algo: PPO, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    obs = torch.from_numpy(rng.normal(size=(STEPS + 1, ENVS, OBS)).astype(np.float32))
    with torch.no_grad():
        dist = algo.actor.distribution(obs[:-1])
        action = dist.sample()
        logprob = dist.log_prob(action).sum(-1)
    reward = torch.from_numpy(rng.normal(size=(STEPS, ENVS)).astype(np.float32))
    terminated = torch.from_numpy((rng.random((STEPS, ENVS)) < 0.1).astype(np.float32))
    truncated = torch.from_numpy((rng.random((STEPS, ENVS)) < 0.05).astype(np.float32))
    return {
        "obs_policy": obs[:-1].contiguous(),
        "next_obs_policy": obs[1:].contiguous(),
        "action": action,
        "logprob": logprob,
        "reward": reward,
        "terminated": terminated,
        "truncated": truncated,
    }


def run(world: World, updates: int) -> dict[str, np.ndarray]:
    torch.manual_seed(7)
    cfg = PPOConfig(num_epochs=2, num_minibatches=3, actor_hidden=[16], critic_hidden=[16])
    algo = PPO(cfg, {"policy": OBS}, ACT, torch.device("cpu"))
    world.attach(algo)
    rng = np.random.default_rng(3)
    per_rank = ENVS // world.size
    lo = world.rank * per_rank
    for _ in range(updates):
        # Every rank draws the same combined batch (same torch and numpy streams), keeps its
        # columns; the sampling's RNG use is the same on every rank, so streams stay aligned.
        batch = combined_batch(algo, rng)
        shard = {k: v[:, lo : lo + per_rank].contiguous() for k, v in batch.items()}
        algo.update(shard)
    state = {
        **algo.actor.state_dict(),
        **{f"critic.{k}": v for k, v in algo.critic.state_dict().items()},
    }
    return {k: v.detach().numpy().copy() for k, v in state.items()} | {"lr": np.array(algo.lr)}


if __name__ == "__main__":
    world = init_world(torch.device("cpu"))
    params = run(world, int(sys.argv[2]))
    if world.rank == 0:
        np.savez(sys.argv[1], **params)
    world.close()
    end_process_after_group(0)
