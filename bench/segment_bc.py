"""Behaviour cloning and in-sim evaluation for `bench.segment_critic`: a state MLP trained
with MSE on the action from `FrameDataset` batches (uniform items, or drawn by
`WeightedFrameSampler` from a curated store's `weight` column), and its success rate on
fresh `arm_pick_place` episodes of the ground-truth task config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from unilab.data.dataset import FrameDataset
from unilab.data.sampler import WeightedFrameSampler
from unilab.teleop.segmentation.ground_truth import task_config


class MLPPolicy(nn.Module):
    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden),
            nn.SiLU(),
            nn.Linear(hidden, hidden),
            nn.SiLU(),
            nn.Linear(hidden, action_dim),
        )
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("std", torch.ones(obs_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net((obs - self.mean) / self.std)


def train_bc(store: Path, steps: int, batch: int, seed: int, weighted: bool) -> MLPPolicy:
    """MSE behaviour cloning of obs/policy -> action; `steps` gradient steps of `batch`
    items, drawn uniformly or in proportion to the store's `weight` column (`weighted`)."""
    torch.manual_seed(seed)
    data = FrameDataset(store, fields=["obs/policy", "action"])
    try:
        rng = np.random.default_rng(seed)
        sampler = WeightedFrameSampler(data, batch, seed=seed) if weighted else None
        every = data.batch(np.arange(len(data)))
        obs_all = every["obs/policy"].float()
        policy = MLPPolicy(obs_all.shape[1], every["action"].shape[1])
        policy.mean.copy_(obs_all.mean(0))
        policy.std.copy_(obs_all.std(0).clamp_min(1e-2))
        opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
        for _ in range(steps):
            items = rng.integers(0, len(data), batch) if sampler is None else sampler.draw(batch)
            b = data.batch(items)
            loss = ((policy(b["obs/policy"].float()) - b["action"].float()) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        data.close()
    policy.eval()
    return policy


def evaluate(policy: MLPPolicy, episodes: int, seed: int) -> float:
    """Success rate of `policy` over the first episode of `episodes` fresh envs."""
    from unilab.tasks.registry import make_task

    task = make_task(task_config(), num_envs=episodes, seed=seed)
    try:
        obs = task.reset()
        done = np.zeros(episodes, dtype=bool)
        success = np.zeros(episodes, dtype=bool)
        while not done.all():
            with torch.no_grad():
                act = policy(torch.from_numpy(obs["policy"]).float()).clamp(-1, 1).numpy()
            result = task.step(act)
            ended = (result.terminated | result.truncated) & ~done
            success |= ended & (result.extras["success"] > 0.5)
            done |= ended
            obs = result.obs
    finally:
        task.close()
    return float(success.mean())
