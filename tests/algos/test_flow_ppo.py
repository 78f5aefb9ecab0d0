"""flow_ppo: GAE over decisions against hand-computed answers, sampled chains that recompute
to the log-probabilities the workers send, an update that moves the flow toward the chains
with positive advantage, and the init run's model adopted at compose time."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
import torch
import yaml

from unilab.algos.chunk_returns import decision_advantages
from unilab.algos.flow_ppo import FlowPPO, FlowPPOConfig
from unilab.config import compose
from unilab.config.errors import ConfigError
from unilab.policies.vla.config import VLAConfig
from unilab.utils.checkpoint import save_checkpoint

SHAPES = {"policy": (6,), "critic": (8,)}
A = 2


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def col(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)[:, None]


def test_decision_returns_by_hand() -> None:
    # One env, 4 steps, decisions at 0 and 2, no episode end; gamma 0.5, lambda 1.
    v, nv = col(0.1, 0.2, 0.3, 0.4), col(0.0, 0.0, 0.0, 1.0)
    adv, ret, steps = decision_advantages(
        col(1, 1, 1, 1), col(0, 0, 0, 0), col(0, 0, 0, 0), col(1, 0, 1, 0), v, nv, 0.5, 1.0
    )
    # decision 2: 1 + 0.5 + 0.25 * V(next_obs[3]) = 1.75, minus V 0.3
    # decision 0: 1 + 0.5 + 0.25 * V(obs[2]) = 1.575, minus 0.1, plus 0.5^2 * 1.45
    assert adv[:, 0].tolist() == pytest.approx([1.8375, 0.0, 1.45, 0.0])
    # lambda = 1: the return of decision 0 is the whole discounted sum, 1.9375
    assert ret[:, 0].tolist() == pytest.approx([1.9375, 0.0, 1.75, 0.0])
    assert steps[:, 0].tolist() == [2.0, 0.0, 2.0, 0.0]


def test_decisions_stop_at_termination_and_bootstrap_time_outs() -> None:
    # Two envs. Env 0: decision at 0, terminated at step 1, new decision at 2 (reset).
    # Env 1: decision at 0, time-out at step 2, decision at 3. gamma 0.9, lambda 0.5.
    reward = torch.tensor([[1.0, 1.0], [2.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    term = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    trunc = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    replanned = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    v = torch.full((4, 2), 0.5)
    nv = torch.full((4, 2), 2.0)
    adv, ret, steps = decision_advantages(reward, term, trunc, replanned, v, nv, 0.9, 0.5)
    # env 0, decision 0: 1 + 0.9 * 2 (terminated: no bootstrap) = 2.8; not linked onward
    assert ret[0, 0] == pytest.approx(2.8) and adv[0, 0] == pytest.approx(2.3)
    # env 0, decision 2: 1 + 0.9 * 1 + 0.81 * V(next_obs[3]) = 3.52 (window end)
    assert ret[2, 0] == pytest.approx(1.9 + 0.81 * 2.0) and steps[2, 0] == 2
    # env 1, decision 0: 3 steps up to the time-out, bootstrapped with V(next_obs[2]) = 2
    g = 1 + 0.9 + 0.81 + 0.729 * 2.0
    assert ret[0, 1] == pytest.approx(g) and steps[0, 1] == 3
    # ... and not linked to decision 3, which is in the next episode
    assert adv[0, 1] == pytest.approx(g - 0.5)
    assert adv[3, 1] == pytest.approx(1 + 0.9 * 2.0 - 0.5)


def tiny_cfg(**kw: object) -> FlowPPOConfig:
    model = VLAConfig(
        horizon=4, num_steps=3, n_act=2, width=32, heads=2, prefix_layers=1, expert_layers=1,
        flow_noise=True, noise_std_min=0.2, noise_std_max=0.4,
    )  # fmt: skip
    base: dict[str, object] = dict(
        model=model, critic_warmup=0, num_epochs=4, num_minibatches=2, target_kl=0.0,
        actor_lr=3e-3, clip=0.2, reward="task",
    )  # fmt: skip
    base.update(kw)
    return FlowPPOConfig(**base)  # type: ignore[arg-type]


def test_sampled_chains_recompute_to_the_log_probabilities_sent() -> None:
    torch.manual_seed(0)
    learner = FlowPPO(tiny_cfg(), SHAPES, A, torch.device("cpu"))
    obs = {"policy": torch.randn(5, 6)}
    chunk = learner.actor.act(obs)
    chain, logp = chunk.extras["chain"], chunk.extras["chain_logp"]
    assert chain.shape == (5, 4, 4, A) and logp.shape == (5, 4)
    assert chunk.logprob is not None
    torch.testing.assert_close(chunk.logprob, logp.sum(-1))
    with torch.no_grad():
        again = learner.actor.chain_log_prob(obs, chain)
    torch.testing.assert_close(again, logp, rtol=1e-4, atol=1e-4)
    # the executed actions are the chain's last state, unnormalized
    torch.testing.assert_close(chunk.actions, learner.actor.action_norm.unnormalize(chain[:, -1]))


def synthetic_batch(learner: FlowPPO, seed: int, t: int = 8, n: int = 32) -> dict:
    """Decisions every 2 steps; the reward of a step is +1 when the first action coordinate
    of the chunk's first action is above 0, else -1."""
    g = torch.Generator().manual_seed(seed)
    obs_p = torch.randn(t, n, 6, generator=g)
    obs_c = torch.randn(t, n, 8, generator=g)
    chains = torch.zeros(t, n, 4, 4, A)
    logps = torch.zeros(t, n, 4)
    reward = torch.zeros(t, n)
    tokens = torch.zeros(t, n, dtype=torch.int64)
    for s in range(0, t, 2):
        chunk = learner.actor.act({"policy": obs_p[s]})
        for k in (s, s + 1):
            chains[k], logps[k] = chunk.extras["chain"], chunk.extras["chain_logp"]
            reward[k] = torch.where(chunk.actions[:, 0, 0] > 0, 1.0, -1.0)
            if "token" in chunk.extras:
                tokens[k] = chunk.extras["token"]
    replanned = torch.zeros(t, n)
    replanned[::2] = 1.0
    zeros = torch.zeros(t, n)
    return {
        "obs_policy": obs_p, "obs_critic": obs_c, "next_obs_critic": obs_c, "reward": reward,
        "terminated": zeros, "truncated": zeros, "replanned": replanned, "chain": chains,
        "chain_logp": logps, "token": tokens,
    }  # fmt: skip


def test_update_moves_the_flow_toward_chains_with_positive_advantage() -> None:
    torch.manual_seed(0)
    learner = FlowPPO(tiny_cfg(), SHAPES, A, torch.device("cpu"))
    probe = {"policy": torch.randn(256, 6, generator=torch.Generator().manual_seed(9))}

    def mean_first_action() -> float:
        with torch.no_grad():
            return float(learner.actor.act_inference(probe)[:, 0, 0].mean())

    before = mean_first_action()
    metrics = {}
    for it in range(12):
        metrics = learner.update(synthetic_batch(learner, it))
    after = mean_first_action()
    assert metrics["decisions"] == 4 * 32 and metrics["decision_steps"] == 2.0
    assert after > before + 0.3, (before, after)


def test_critic_warmup_leaves_the_policy_alone() -> None:
    torch.manual_seed(0)
    learner = FlowPPO(tiny_cfg(critic_warmup=1), SHAPES, A, torch.device("cpu"))
    before = [p.detach().clone() for p in learner.actor.parameters()]
    metrics = learner.update(synthetic_batch(learner, 0))
    assert metrics["actor_trained"] == 0.0 and metrics["value_loss"] > 0
    for p, q in zip(before, learner.actor.parameters(), strict=True):
        assert torch.equal(p, q)


def bc_checkpoint(tmp_path: Path, model: VLAConfig, name: str = "bc_flow") -> Path:
    """A checkpoint as a bc_flow run writes it: its config and the actor's weights."""
    from unilab.algos.bc_flow import BCFlow, BCFlowConfig

    cfg = BCFlowConfig(model=model)
    actor = BCFlow.build_actor(cfg, {"policy": (6,)}, A)
    algo = {**dataclasses.asdict(cfg), "name": name}
    state = {
        "config": yaml.safe_dump({"algo": algo}),
        "algo": {"actor": actor.state_dict()},
        "iteration": 1,
        "env_steps": 0,
    }
    return save_checkpoint(tmp_path / "checkpoints", 1, state)


def test_init_run_gives_the_model_and_its_weights(tmp_path: Path) -> None:
    model = VLAConfig(
        horizon=4, num_steps=3, n_act=2, width=32, heads=2, prefix_layers=1, expert_layers=1
    )
    bc_checkpoint(tmp_path, model)
    cfg = compose(
        ["task=cartpole_balance", "algo=flow_ppo", f"algo.init={tmp_path}", "algo.n_act=3"]
    ).algo
    assert cfg.model.width == 32 and cfg.model.horizon == 4 and cfg.model.flow_noise
    assert cfg.model.n_act == 3 and cfg.model_from == str(tmp_path)
    assert cfg.model.num_steps == 3  # the init run's K unless algo.num_steps says otherwise
    fewer = compose(
        ["task=cartpole_balance", "algo=flow_ppo", f"algo.init={tmp_path}", "algo.num_steps=2"]
    ).algo
    assert fewer.model.num_steps == 2 and fewer.model.width == 32
    learner = FlowPPO(cfg, {"policy": (6,), "critic": (8,)}, A, torch.device("cpu"))
    state = torch.load(next((tmp_path / "checkpoints").glob("*.pt")), weights_only=True)
    for key, value in state["algo"]["actor"].items():
        torch.testing.assert_close(learner.actor.state_dict()[key], value)


def test_bad_init_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        compose(["task=cartpole_balance", "algo=flow_ppo", f"algo.init={tmp_path / 'nope'}"])
    model = VLAConfig(horizon=4, num_steps=3, n_act=2, width=32, heads=2)
    bc_checkpoint(tmp_path, model, name="ppo")
    with pytest.raises(ConfigError, match="need bc_flow or flow_ppo"):
        compose(["task=cartpole_balance", "algo=flow_ppo", f"algo.init={tmp_path}"])


def test_rollout_chunks_carry_chains_tokens_and_episode_outcomes() -> None:
    """A real task through `collect_chunk`: one token per episode and env, decisions every
    n_act steps (and after resets), chains that recompute to the log-probs sent, and the
    episode's success where it ended."""
    import numpy as np

    from unilab.algos.build import build_policy
    from unilab.runtime.rollout import collect_chunk, start_rollout
    from unilab.tasks.registry import make_task
    from unilab.train.runner import probe_task

    cfg = compose(
        ["task=cartpole_balance", "algo=flow_ppo", "task.episode_length_s=0.4",
         "algo.model.n_tokens=3", "algo.model.horizon=4", "algo.model.n_act=2",
         "algo.model.num_steps=3", "algo.model.width=32", "algo.model.heads=2",
         "algo.model.prefix_layers=1", "algo.model.expert_layers=1"]
    )  # fmt: skip
    assert cfg.algo.model.rollout_tokens and cfg.algo.model.token_selector
    shapes = probe_task(cfg)
    fields = FlowPPO.rollout_fields(cfg.algo, shapes)
    assert {"chain", "chain_logp", "replanned", "token", "episode_success"} <= set(fields)
    task = make_task(cfg.task, num_envs=4, seed=0, sim_cfg=cfg.sim)
    torch.manual_seed(0)
    policy = build_policy(cfg.algo, task)
    t_len = 40
    out = {k: np.zeros((t_len, 4, *shape), dtype) for k, (shape, dtype) in fields.items()}
    collect_chunk(task, policy, out, start_rollout(task), n_act=2)
    done = (out["terminated"] + out["truncated"]) > 0
    assert done.any()
    for env in range(4):
        starts = [s for s in np.flatnonzero(done[:, env]) + 1 if s < t_len]
        for a, b in itertools.pairwise([0, *starts, t_len]):
            assert len(set(out["token"][a:b, env].tolist())) == 1  # one token per episode
        assert out["replanned"][0, env] == 1 and out["replanned"][1, env] == 0
    ends = ~np.isnan(out["episode_success"])
    np.testing.assert_array_equal(ends, done)
    decide = out["replanned"] > 0.5
    obs = {"policy": torch.from_numpy(out["obs_policy"][decide])}
    obs["token"] = torch.from_numpy(out["token"][decide])
    with torch.no_grad():
        again = policy.chain_log_prob(obs, torch.from_numpy(out["chain"][decide]))
    torch.testing.assert_close(
        again, torch.from_numpy(out["chain_logp"][decide]), atol=2e-4, rtol=1e-4
    )


def test_tokens_whose_rollouts_succeed_win_the_schedule_and_the_selector() -> None:
    import numpy as np

    torch.manual_seed(0)
    model = tiny_cfg().model
    model.n_tokens, model.rollout_tokens, model.token_selector = 3, True, True
    learner = FlowPPO(
        tiny_cfg(model=model, token_schedule="bandit", selector_lr=1e-2), SHAPES, A,
        torch.device("cpu"),
    )  # fmt: skip
    probe = {"policy": torch.randn(64, 6, generator=torch.Generator().manual_seed(3))}
    for it in range(15):
        learner.actor.episodes_ended(np.ones(32, bool))  # each batch: one episode per env
        batch = synthetic_batch(learner, it)
        token = batch["token"]
        # Token 1's episodes succeed and earn reward; the others fail.
        batch["reward"] = (token == 1).float()
        success = torch.full_like(batch["reward"], float("nan"))
        success[-1] = (token[-1] == 1).float()
        batch["episode_success"] = success
        batch["truncated"] = torch.zeros_like(batch["reward"])
        batch["truncated"][-1] = 1.0
        metrics = learner.update(batch)
    assert metrics["token_prob_1"] > 0.6 and metrics["token_success_1"] > 0.8
    with torch.no_grad():
        picks = learner.actor.select_tokens(probe)
    assert (picks == 1).float().mean() > 0.75  # chance: 1 in 3


def test_a_fresh_selector_learns_the_better_token_within_three_batches() -> None:
    """Evaluation runs the selector's choice from the first iteration on, so it must learn
    fast at the default learning rate (one step per batch took tens of iterations)."""
    import numpy as np

    torch.manual_seed(0)
    model = tiny_cfg().model
    model.n_tokens, model.rollout_tokens, model.token_selector = 3, True, True
    learner = FlowPPO(tiny_cfg(model=model), SHAPES, A, torch.device("cpu"))
    probe = {"policy": torch.randn(64, 6, generator=torch.Generator().manual_seed(3))}
    for it in range(3):
        learner.actor.episodes_ended(np.ones(32, bool))
        batch = synthetic_batch(learner, it)
        batch["reward"] = (batch["token"] == 2).float()  # token 2's decisions pay
        batch["episode_success"] = torch.full_like(batch["reward"], float("nan"))
        learner.update(batch)
    with torch.no_grad():
        picks = learner.actor.select_tokens(probe)
    assert (picks == 2).float().mean() > 0.9  # chance: 1 in 3


def test_a_frozen_actor_keeps_its_modes_while_the_selector_learns() -> None:
    import numpy as np

    torch.manual_seed(0)
    model = tiny_cfg().model
    model.n_tokens, model.rollout_tokens, model.token_selector = 3, True, True
    learner = FlowPPO(tiny_cfg(model=model, freeze_actor=True), SHAPES, A, torch.device("cpu"))
    selector = learner.actor.selector
    assert selector is not None
    chosen = {id(p) for p in selector.parameters()}
    policy_before = [p.detach().clone() for p in learner.actor.parameters() if id(p) not in chosen]
    selector_before = [p.detach().clone() for p in selector.parameters()]
    probe = {"policy": torch.randn(64, 6, generator=torch.Generator().manual_seed(3))}
    metrics = {}
    for it in range(3):
        learner.actor.episodes_ended(np.ones(32, bool))
        batch = synthetic_batch(learner, it)
        batch["reward"] = (batch["token"] == 2).float()
        batch["episode_success"] = torch.full_like(batch["reward"], float("nan"))
        metrics = learner.update(batch)
    assert metrics["actor_trained"] == 0.0 and metrics["value_loss"] > 0
    policy_after = [p for p in learner.actor.parameters() if id(p) not in chosen]
    assert all(torch.equal(p, q) for p, q in zip(policy_before, policy_after, strict=True))
    assert not all(
        torch.equal(p, q) for p, q in zip(selector_before, selector.parameters(), strict=True)
    )
    with torch.no_grad():
        picks = learner.actor.select_tokens(probe)
    assert (picks == 2).float().mean() > 0.9


def test_success_reward_comes_from_episode_ends_and_needs_a_success_metric() -> None:
    from types import SimpleNamespace

    torch.manual_seed(0)
    values = {}
    for reward in ("success", "task"):
        learner = FlowPPO(
            tiny_cfg(reward=reward, critic_warmup=100, critic_lr=1e-2), SHAPES, A,
            torch.device("cpu"),
        )  # fmt: skip
        batch = synthetic_batch(learner, 0)
        batch["reward"] = torch.full_like(batch["reward"], 10.0)  # the shaped reward
        success = torch.full_like(batch["reward"], float("nan"))
        success[-1] = 1.0  # every episode ends with success at the last step
        batch["episode_success"], batch["terminated"] = success, (~success.isnan()).float()
        for _ in range(30):
            learner.update(batch)
        with torch.no_grad():
            values[reward] = float(learner.critic(batch["obs_critic"]).mean())
    # success: returns of at most 1 (gamma^k to the success); task: sums of 10s
    assert 0.3 < values["success"] < 1.5 and values["task"] > 20.0, values
    shapes = SimpleNamespace(
        obs_dims={"policy": 6}, obs_shapes={"policy": (6,)}, action_dim=A, task_metrics=[]
    )
    with pytest.raises(ConfigError, match="needs a task with a `success` metric"):
        FlowPPO.rollout_fields(tiny_cfg(reward="success"), shapes)
