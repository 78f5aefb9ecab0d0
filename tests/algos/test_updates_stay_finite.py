"""100 PPO updates on data from envs whose physics is made to blow up: nothing non-finite
reaches the learner, the sim resets and counts the envs, and every parameter stays finite."""

from __future__ import annotations

import numpy as np
import torch

from unilab.algos.ppo import PPO, PPOConfig
from unilab.config import compose
from unilab.runtime.rollout import collect_chunk, start_rollout
from unilab.tasks.registry import make_task


def test_parameters_finite_after_100_updates_with_injected_faults() -> None:
    torch.manual_seed(0)
    cfg = compose(["algo=ppo", "algo.num_epochs=1", "algo.num_minibatches=1"])
    task = make_task(cfg.task, num_envs=16, seed=0)
    assert isinstance(cfg.algo, PPOConfig)
    learner = PPO(cfg.algo, task.obs_dims, task.action_dim, torch.device("cpu"))
    fields = PPO.chunk_fields(task.obs_dims, task.action_dim)
    buf = {k: np.zeros((8, 16, *shape), dtype=dtype) for k, (shape, dtype) in fields.items()}
    rng = np.random.default_rng(1)
    injected = 0
    last_step_injected = False

    def inject() -> None:
        nonlocal injected, last_step_injected
        last_step_injected = False
        if rng.random() < 0.3:
            last_step_injected = True
            env = rng.integers(16)
            task.sim.qvel[env, rng.integers(task.sim.qvel.shape[1])] = rng.choice([np.nan, 1e12])
            injected += 1

    state = start_rollout(task)
    for _ in range(100):
        collect_chunk(task, learner.actor, buf, state, on_step=inject)
        for name, array in buf.items():
            if name != "episode_return":  # NaN there means "no episode ended at this step"
                assert np.isfinite(array).all(), name
        learner.update({k: torch.from_numpy(v) for k, v in buf.items()})
    assert injected > 100
    # every fault detected, reset and counted (one injected after the final step is pending)
    assert state.sim_unstable == injected - int(last_step_injected)
    for module in (learner.actor, learner.critic):
        for name, tensor in module.state_dict().items():
            assert torch.isfinite(tensor).all(), name
