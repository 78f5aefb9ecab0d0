"""The policy contract and the rollout helpers: every actor speaks it, chunks execute over
several steps, episodes are counted as play and eval count them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
import torch

from unilab.algos.build import build_policy, make_task_and_policy
from unilab.config import compose
from unilab.deploy.policy_source import ConstantBaseline
from unilab.runtime.policy import ActionChunk, ActionQueue, Policy
from unilab.runtime.rollout import StepInfo, rollout
from unilab.runtime.torch_policy import NumpyPolicy
from unilab.tasks.registry import make_task


@pytest.mark.parametrize("algo", ["ppo", "sac", "td3"])
def test_every_actor_is_a_policy_with_one_action_chunks(algo: str) -> None:
    torch.manual_seed(0)
    cfg = compose(["task=cartpole_balance", f"algo={algo}", "algo.actor_hidden=[16]"])
    task, policy = make_task_and_policy(cfg, num_envs=6, seed=0)
    assert isinstance(policy, Policy)
    assert policy.obs_groups == ("policy",) and policy.action_horizon == 1
    obs_np = task.reset()
    obs = {k: torch.from_numpy(v) for k, v in obs_np.items()}
    chunk = policy.act(obs)
    assert chunk.actions.shape == (6, 1, task.action_dim)
    assert chunk.logprob is not None and chunk.logprob.shape == (6,)
    with torch.no_grad():
        det = policy.act(obs, deterministic=True).actions
        assert torch.equal(policy.act_inference(obs), det)
        assert torch.equal(policy.act_inference(obs)[:, 0], policy(obs["policy"]))
        numpy_side = NumpyPolicy(policy)
        assert isinstance(numpy_side, Policy)
        assert np.array_equal(numpy_side.act_inference(obs_np), det.numpy())


class CountingChunks:
    """A numpy Policy with H = 4: action value = 0.1 * position in the chunk (push right)."""

    obs_groups = ("policy",)
    action_dim = 1
    action_horizon = 4

    def __init__(self) -> None:
        self.calls = 0

    def act_inference(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        n = len(obs["policy"])
        return np.tile(0.1 * np.arange(4, dtype=np.float32)[None, :, None] + 0.5, (n, 1, 1))

    def act(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> ActionChunk:
        self.calls += 1
        return ActionChunk(self.act_inference(obs), np.full(len(obs["policy"]), -1.0, np.float32))


def test_rollout_executes_n_act_actions_per_chunk_and_replans_after_an_episode_end() -> None:
    cfg = compose(["task=cartpole_balance", "task.episode_length_s=0.5"])  # 25-step time-out
    task = make_task(cfg.task, num_envs=3, seed=1)
    policy = CountingChunks()
    seen: list[StepInfo] = []
    result = rollout(task, policy, steps=60, n_act=3, on_step=seen.append)
    assert isinstance(policy, Policy) and result.steps == 60
    ended = np.stack([s.result.terminated | s.result.truncated for s in seen])  # (60, 3)
    assert ended.any(axis=0).all(), "every env should end an episode in 60 steps"
    for env in range(3):
        since_plan = 0
        for t, info in enumerate(seen):
            # An env plans at its first step, after its episode ended (never finishing the
            # old chunk in the new episode), and once it has executed 3 actions.
            must_plan = t == 0 or ended[t - 1, env] or since_plan == 3
            assert bool(info.planned[env]) == must_plan, (env, t)
            since_plan = 1 if must_plan else since_plan + 1
            assert info.actions[env, 0] == pytest.approx(0.5 + 0.1 * (since_plan - 1))
    assert policy.calls == sum(bool(s.planned.any()) for s in seen)
    assert policy.calls < 60  # chunks really span several steps
    assert len(result.episodes) == int(ended.sum())


def test_rollout_counts_one_episode_per_env_or_the_first_ones() -> None:
    cfg = compose(["task=cartpole_balance"])
    task = make_task(cfg.task, num_envs=4, seed=0)
    zero = ConstantBaseline(_meta(task), random=False)
    first = rollout(task, zero, episodes=4, one_per_env=True, steps=task.max_episode_steps + 1)
    assert sorted(e.env for e in first.episodes) == [0, 1, 2, 3]
    # A zero force never balances the pole: every episode fails (cart-pole's success is
    # running to the time limit).
    assert first.success_rate() == 0.0 and first.mean_return() is not None
    some = rollout(task, zero, episodes=2, steps=10_000)
    assert len(some.episodes) >= 2
    with pytest.raises(ValueError, match="needs a limit"):
        rollout(task, zero)
    with pytest.raises(ValueError, match="at least that many envs"):
        rollout(task, zero, episodes=5, one_per_env=True)


def test_a_policy_for_another_task_is_refused_by_name() -> None:
    cart = make_task(compose(["task=cartpole_balance"]).task, num_envs=1)
    arm_cfg = compose(["task=arm_reach", "algo.actor_hidden=[8]"])
    arm_policy = build_policy(arm_cfg.algo, make_task(arm_cfg.task, num_envs=1))
    with pytest.raises(ValueError, match="task 'cartpole_balance' has groups"):
        rollout(cart, arm_policy, steps=1)


def test_action_queue_refuses_short_chunks() -> None:
    queue = ActionQueue(num_envs=2, action_dim=1, n_act=5)
    with pytest.raises(ValueError, match="cannot execute n_act=5"):
        queue.next(CountingChunks(), {"policy": np.zeros((2, 5), np.float32)})


def _meta(task):  # the few metadata fields a baseline reads
    from unilab.export.run_policy import policy_metadata

    cfg = compose([f"task={task.cfg.name}"])
    return policy_metadata(task, cfg, {})


def test_a_vla_runs_through_its_own_executor_reproducibly_from_its_noise_seed() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = compose(
        [
            *("task=arm_move_side", "task.cameras=[front]", "task.image_size=16"),
            *("algo.model.width=16", "algo.model.heads=2", "algo.model.image_channels=[8]"),
            *("algo.model.horizon=6", "algo.model.n_act=3", "algo.model.num_steps=2"),
            *("algo.model.prefix_layers=0", "algo.model.expert_layers=1"),
        ]
    )
    task, policy = make_task_and_policy(cfg, num_envs=2, seed=0)
    with torch.no_grad():  # zero-initialised output layers: make the chunks depend on noise
        for p in policy.parameters():
            if p.abs().sum() == 0:
                p.normal_(0.0, 0.3)
    start = (task.sim.snapshot(), task.get_state())

    def run(**kw: object) -> tuple[np.ndarray, np.ndarray]:
        task.sim.restore(start[0])
        task.set_state(start[1])
        actions, planned = [], []

        def keep(info: StepInfo) -> None:
            actions.append(info.actions.copy())
            planned.append(info.planned.copy())

        rollout(task, policy, steps=9, on_step=keep, **kw)  # type: ignore[arg-type]
        return np.stack(actions), np.stack(planned)

    a, plans = run(noise_seed=5)
    assert plans[:, 0].tolist() == [True, False, False] * 3  # n_act = 3 of H = 6
    assert np.array_equal(a, run(noise_seed=5)[0])
    assert not np.allclose(a, run(noise_seed=6)[0])
    every, plans2 = run(noise_seed=5, n_act=1, ensemble_decay=0.01)
    assert plans2.all() and not np.allclose(every, a)
    with pytest.raises(ValueError, match="temporal ensembling needs a policy with its own"):
        cart, mlp = make_task_and_policy(compose(["task=cartpole_balance"]), 2, 0)
        rollout(cart, mlp, steps=2, ensemble_decay=0.01)


def test_episodes_carry_each_task_metric_averaged_over_their_steps() -> None:
    from unilab.tasks.arm_reach import ArmReachConfig

    task = make_task(ArmReachConfig(episode_length_s=0.2), num_envs=3, seed=4)  # 10 steps
    policy = ConstantBaseline(_meta(task), random=True, seed=1)
    seen: list[np.ndarray] = []
    result = rollout(
        task,
        policy,
        episodes=3,
        one_per_env=True,
        on_step=lambda info: seen.append(info.result.extras["distance"].copy()),
    )
    assert len(result.episodes) == 3
    distances = np.stack(seen)  # (10, 3): every env's first episode ends at step 10
    for ep in result.episodes:
        assert set(ep.metrics) == {"distance", "success"}
        assert ep.metrics["distance"] == pytest.approx(float(distances[:, ep.env].mean()))
        assert ep.to_dict()["metrics"] == ep.metrics
