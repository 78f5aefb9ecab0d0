"""Branching rollouts: a forked sibling is an exact copy of its leader (same actions, same
trajectory), the chunk marks the fork and cuts the siblings' old trajectories as
truncations, PPO scores siblings against their group's mean at the branch point, and the
whole loop trains with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.algos.ppo import PPO, group_relative
from unilab.config import compose
from unilab.config.errors import ConfigError
from unilab.deploy.policy_source import ConstantBaseline
from unilab.runtime.branching import BranchingError, BranchPlan
from unilab.runtime.fields import info_fields
from unilab.runtime.rollout import collect_chunk, start_rollout
from unilab.tasks.arm_reach import ArmReachConfig
from unilab.tasks.registry import make_task
from unilab.train import train
from unilab.utils.metrics import read_metrics


def test_a_forked_sibling_follows_its_leader_exactly_under_the_same_actions() -> None:
    task = make_task(ArmReachConfig(), num_envs=4, seed=2)
    task.reset()
    rng = np.random.default_rng(0)
    for _ in range(7):
        task.step(rng.uniform(-1, 1, (4, task.action_dim)).astype(np.float32))
    task.fork_env(1, np.array([2, 3]))
    obs = task.observation()["policy"]
    assert np.array_equal(obs[2], obs[1]) and np.array_equal(obs[3], obs[1])
    assert not np.array_equal(obs[0], obs[1])
    for _ in range(20):
        a = rng.uniform(-1, 1, (4, task.action_dim)).astype(np.float32)
        a[2] = a[1]  # env 2: the leader's actions; env 3: its own
        out = task.step(a)
        assert np.array_equal(out.obs["policy"][2], out.obs["policy"][1])
        assert out.reward[2] == out.reward[1]
    assert not np.array_equal(out.obs["policy"][3], out.obs["policy"][1])


def _chunk(task, steps: int) -> dict[str, np.ndarray]:
    fields = PPO.chunk_fields(task.obs_dims, task.action_dim)
    fields.update(info_fields([], [], branching=True))
    return {
        k: np.full((steps, task.num_envs, *shape), np.nan, dtype=dtype)
        for k, (shape, dtype) in fields.items()
    }


def test_the_chunk_marks_forks_and_cuts_the_siblings_old_trajectories() -> None:
    task = make_task(ArmReachConfig(), num_envs=6, seed=1)
    plan = BranchPlan.check(3, 5, task.num_envs)
    assert plan is not None
    meta_cfg = compose(["task=arm_reach"])
    from unilab.export.run_policy import policy_metadata

    policy = ConstantBaseline(policy_metadata(task, meta_cfg, {}), random=True, seed=3)
    out = _chunk(task, 12)
    out.pop("logprob")  # a baseline has no log-probabilities
    collect_chunk(task, policy, out, start_rollout(task), branching=plan)
    bp = out["branch_point"]
    # every leader reaches episode step 5 after step index 4 and 10 after index 9
    assert (bp[4] == 3).all() and (bp[9] == 3).all()
    assert (bp[[0, 1, 2, 3, 5, 6, 7, 8, 10, 11]] == 0).all()
    siblings = np.array([1, 2, 4, 5])
    assert (out["truncated"][4, siblings] == 1).all() and (out["truncated"][4, [0, 3]] == 0).all()
    obs = out["obs_policy"]
    for leader in (0, 3):  # the step after the fork starts from the leader's state
        for s in (leader + 1, leader + 2):
            assert np.array_equal(obs[5, s], obs[5, leader])
            assert not np.array_equal(out["next_obs_policy"][4, s], obs[5, s])  # was cut
        assert not np.array_equal(obs[8, leader + 1], obs[8, leader])  # own actions diverge


def test_group_relative_advantage_at_the_branch_point() -> None:
    adv = torch.zeros(3, 4)
    full = torch.tensor([[0.0, 0, 0, 0], [1.0, 3.0, 10.0, 20.0], [0.0, 0, 0, 0]])
    bp = torch.zeros(3, 4)
    bp[0] = 2.0  # two groups of 2 forked after step 0
    out = group_relative(adv, full, bp, weight=1.0)
    assert out[1].tolist() == [-1.0, 1.0, -5.0, 5.0]
    assert torch.equal(out[[0, 2]], adv[[0, 2]])
    half = group_relative(torch.ones(3, 4), full, bp, weight=0.5)
    assert half[1].tolist() == [0.0, 1.0, -2.0, 3.0]


def test_branching_settings_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    assert BranchPlan.check(1, 5, 6) is None
    with pytest.raises(BranchingError, match="must divide"):
        BranchPlan.check(4, 5, 6)
    cfg = compose(
        ["task=arm_reach", "sim.num_envs=6", "runtime.branching_k=4", f"run.out_dir={tmp_path}"]
    )
    with pytest.raises(ConfigError, match="must divide"):
        train(cfg)
    assert not any(tmp_path.iterdir())


def test_ppo_trains_with_branching_and_the_group_baseline(tmp_path: Path) -> None:
    cfg = compose(
        [
            "task=arm_reach",
            "sim.num_envs=16",
            "runtime.chunk_len=16",
            "runtime.branching_k=4",
            "runtime.branching_every=6",
            "algo.group_baseline=0.5",
            "run.total_env_steps=1024",
            "logging.tensorboard=false",
            "run.quiet=true",
            "run.export=false",
            f"run.out_dir={tmp_path}",
        ]
    )
    rows = read_metrics(train(cfg).path / "metrics.jsonl")
    assert len(rows) == 4
    assert all(
        np.isfinite(r["algo/policy_loss"]) and np.isfinite(r["algo/value_loss"]) for r in rows
    )
