"""PPO and APPO learn cart-pole in a short in-process run; APPO's correction behaves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unilab.algos.base import Algorithm
from unilab.algos.registry import ALGORITHMS
from unilab.config import compose
from unilab.runtime.rollout import collect_chunk, start_rollout
from unilab.tasks.base import Task
from unilab.tasks.registry import make_task


def _setup(algo: str, seed: int = 0) -> tuple[Task, Algorithm, dict[str, np.ndarray]]:
    torch.manual_seed(seed)
    cfg = compose([f"algo={algo}"])
    task = make_task(cfg.task, num_envs=32, seed=seed)
    cls = ALGORITHMS.get(algo).algo_cls
    learner = cls(cfg.algo, task.obs_dims, task.action_dim, torch.device("cpu"))
    fields = cls.chunk_fields(task.obs_dims, task.action_dim)
    buf = {k: np.zeros((32, 32, *shape), dtype=dtype) for k, (shape, dtype) in fields.items()}
    return task, learner, buf


def _mean_return(buf: dict[str, np.ndarray]) -> float:
    ret = buf["episode_return"]
    ret = ret[np.isfinite(ret)]
    return float(ret.mean()) if ret.size else float("nan")


@pytest.mark.parametrize("algo", ["ppo", "appo"])
def test_learns_cartpole_well_above_random(algo: str) -> None:
    torch.set_num_threads(1)
    task, learner, buf = _setup(algo)
    state = start_rollout(task)
    returns = []
    for _ in range(45):
        collect_chunk(task, learner.actor, buf, state)
        returns.append(_mean_return(buf))
        learner.update({k: torch.from_numpy(v) for k, v in buf.items()})
    early = np.nanmean(returns[:3])
    late = np.nanmean(returns[-5:])
    assert early < 2.5  # a random policy drops the pole within about a second
    assert late > 6.0, f"{algo}: mean return {late:.2f} after 46k steps"
    assert all(torch.isfinite(p).all() for p in learner.actor.parameters())


def test_appo_truncates_importance_weights_of_stale_data() -> None:
    task, learner, buf = _setup("appo")
    state = start_rollout(task)
    collect_chunk(task, learner.actor, buf, state)
    batch = {k: torch.from_numpy(v) for k, v in buf.items()}
    batch["logprob"] = batch["logprob"] - 5.0  # the behaviour policy found these actions unlikely
    metrics = learner.update(batch)
    assert metrics["is_weight_truncated"] > 0.99
    assert metrics["is_weight_mean"] == pytest.approx(learner.cfg.max_is_weight, rel=1e-3)
