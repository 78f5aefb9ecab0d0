"""SAC and TD3: they learn cart-pole, stay finite under extreme data, and checkpoint exactly."""

from __future__ import annotations

import io
import math
import time

import numpy as np
import pytest
import torch

from unilab.algos.base import actor_to_flat, flat_to_actor
from unilab.algos.off_policy import OffPolicyAlgorithm
from unilab.algos.registry import ALGORITHMS
from unilab.config import compose
from unilab.policies.deterministic_actor import DeterministicActor
from unilab.policies.q_critic import TwinQCritic
from unilab.policies.squashed_gaussian import SquashedGaussianActor
from unilab.runtime.rollout import collect_chunk, start_rollout
from unilab.tasks.base import Task
from unilab.tasks.registry import make_task

CPU = torch.device("cpu")
NUM_ENVS, CHUNK_LEN = 16, 16

# The cart-pole presets' learning settings, for the in-process runs below.
LEARN = {
    "sac": [
        "algo.actor_lr=2e-3",
        "algo.critic_lr=2e-3",
        "algo.actor_hidden=[64,64]",
        "algo.critic_hidden=[64,64]",
        "algo.updates_per_batch=32",
    ],
    "td3": [
        "algo.actor_lr=1e-3",
        "algo.critic_lr=2e-3",
        "algo.actor_hidden=[64,64]",
        "algo.critic_hidden=[64,64]",
        "algo.updates_per_batch=48",
        "algo.policy_delay=2",
    ],
}


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _make(
    name: str, overrides: list[str], obs_dims: dict[str, int], action_dim: int
) -> OffPolicyAlgorithm:
    cfg = compose([f"algo={name}", *overrides])
    algo = ALGORITHMS.get(name).algo_cls(cfg.algo, obs_dims, action_dim, CPU)
    assert isinstance(algo, OffPolicyAlgorithm)
    return algo


def _first_episode_return(task: Task, policy: torch.nn.Module | None, steps: int = 500) -> float:
    """Mean return of each env's first episode: deterministic policy, or uniform actions."""
    obs = task.reset()
    total = np.zeros(task.num_envs)
    alive = np.ones(task.num_envs, dtype=bool)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        if policy is None:
            action = rng.uniform(-1, 1, (task.num_envs, task.action_dim)).astype(np.float32)
        else:
            with torch.no_grad():
                action = policy(torch.from_numpy(obs["policy"])).numpy()
        result = task.step(action)
        total += alive * result.reward
        alive &= ~(result.terminated | result.truncated)
        obs = result.obs
        if not alive.any():
            break
    return float(total.mean())


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_learns_cartpole_well_above_a_random_policy(name: str) -> None:
    torch.manual_seed(0)
    cfg = compose(["task=cartpole_balance", f"algo={name}", *LEARN[name]])
    task = make_task(cfg.task, num_envs=NUM_ENVS, seed=0)
    algo = _make(name, LEARN[name], task.obs_dims, task.action_dim)
    fields = type(algo).chunk_fields(task.obs_dims, task.action_dim)
    assert "next_obs_policy" in fields and "logprob" not in fields
    buf = {k: np.zeros((CHUNK_LEN, NUM_ENVS, *s), dtype=d) for k, (s, d) in fields.items()}
    # Workers run their own copy of the actor, refreshed from the learner's flat weights.
    worker_actor = type(algo).build_actor(cfg.algo, task.obs_dims, task.action_dim)
    state = start_rollout(task)
    start = time.perf_counter()
    for _ in range(48):  # 12288 env steps
        flat_to_actor(worker_actor, actor_to_flat(algo.actor))
        collect_chunk(task, worker_actor, buf, state)
        algo.update({k: torch.from_numpy(v) for k, v in buf.items()})
    train_s = time.perf_counter() - start

    eval_task = make_task(cfg.task, num_envs=16, seed=123)
    random_return = _first_episode_return(eval_task, None)
    learned_return = _first_episode_return(eval_task, algo.actor)
    print(
        f"{name}: random {random_return:.2f}, learned {learned_return:.2f}, train {train_s:.1f} s"
    )
    assert random_return < 2.0
    assert learned_return > 5.0, (name, random_return, learned_return)


def _synthetic_batch(
    obs_dims: dict[str, int], action_dim: int, scale: float
) -> dict[str, torch.Tensor]:
    """A (T, N) batch with observations and rewards of magnitude `scale`."""
    horizon, envs = 8, 16
    batch = {}
    for group, dim in obs_dims.items():
        batch[f"obs_{group}"] = scale * torch.randn(horizon, envs, dim)
        batch[f"next_obs_{group}"] = scale * torch.randn(horizon, envs, dim)
    batch["action"] = torch.rand(horizon, envs, action_dim) * 2 - 1
    batch["reward"] = scale * torch.randn(horizon, envs)
    batch["terminated"] = (torch.rand(horizon, envs) < 0.05).float()
    batch["truncated"] = (torch.rand(horizon, envs) < 0.05).float()
    return batch


def _all_finite(algo: OffPolicyAlgorithm) -> None:
    state = algo.state_dict()
    for key in ("actor", "critic", "critic_target", "actor_target", "critic_normalizer"):
        for name, tensor in state.get(key, {}).items():
            assert torch.isfinite(tensor).all(), f"{key}.{name}"
    if "log_alpha" in state:
        assert torch.isfinite(state["log_alpha"])


@pytest.mark.parametrize(
    ("name", "extra"),
    [("sac", []), ("td3", []), ("sac", ["algo.num_atoms=51"]), ("td3", ["algo.num_atoms=51"])],
)
def test_parameters_finite_after_100_updates_with_extreme_data(name: str, extra: list[str]) -> None:
    """Rewards and observations of 1e6 (with an asymmetric critic group): every parameter,
    target and action stays finite, and the actions stay in [-1, 1]."""
    torch.manual_seed(0)
    obs_dims = {"policy": 6, "critic": 9}
    overrides = [
        "algo.learning_starts=0",
        "algo.updates_per_batch=25",
        "algo.batch_size=64",
        "algo.actor_hidden=[32,32]",
        "algo.critic_hidden=[32,32]",
        *extra,
    ]
    algo = _make(name, overrides, obs_dims, 3)
    assert algo.critic_normalizer is not algo.actor.normalizer
    for i in range(4):
        metrics = algo.update(_synthetic_batch(obs_dims, 3, 1e6 if i % 2 == 0 else 1.0))
        assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert algo.grad_steps == 100
    _all_finite(algo)
    obs = 1e6 * torch.randn(64, 6)
    action, _ = algo.actor.rollout_actions(obs)
    assert torch.isfinite(action).all() and action.abs().max() <= 1.0


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_state_dict_round_trip_reproduces_actions(name: str) -> None:
    torch.manual_seed(0)
    obs_dims = {"policy": 5}
    overrides = ["algo.learning_starts=0", "algo.updates_per_batch=10", "algo.batch_size=32"]
    algo = _make(name, overrides, obs_dims, 2)
    for _ in range(3):
        algo.update(_synthetic_batch(obs_dims, 2, 1.0))
    buffer = io.BytesIO()
    torch.save(algo.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)

    torch.manual_seed(1)
    restored = _make(name, overrides, obs_dims, 2)
    restored.load_state_dict(state)
    assert (restored.env_steps, restored.grad_steps) == (algo.env_steps, algo.grad_steps)
    obs = 3.0 * torch.randn(50, 5)
    with torch.no_grad():
        assert torch.equal(algo.actor(obs), restored.actor(obs))
        torch.manual_seed(7)
        sampled, _ = algo.actor.rollout_actions(obs)
        torch.manual_seed(7)
        sampled_again, _ = restored.actor.rollout_actions(obs)
        assert torch.equal(sampled, sampled_again)
        obs_c, act = torch.randn(50, 5), torch.rand(50, 2) * 2 - 1
        assert torch.equal(algo.critic(obs_c, act), restored.critic(obs_c, act))
        assert torch.equal(algo.critic_target(obs_c, act), restored.critic_target(obs_c, act))
    if name == "sac":
        assert torch.equal(state["log_alpha"], restored.state_dict()["log_alpha"])
    # The optimizers continue where they were (Adam step counts travel too).
    moments = restored.critic_optimizer.state_dict()["state"]
    assert int(moments[0]["step"]) == algo.grad_steps


@pytest.mark.parametrize("name", ["sac", "td3"])
def test_uniform_warm_up_then_policy_actions(name: str) -> None:
    obs_dims = {"policy": 4}
    algo = _make(name, ["algo.learning_starts=300", "algo.updates_per_batch=2"], obs_dims, 1)
    assert float(algo.actor.explore_uniform) == 1.0
    metrics = algo.update(_synthetic_batch(obs_dims, 1, 1.0))  # 128 env steps
    assert algo.grad_steps == 0 and metrics["explore_uniform"] == 1.0
    # The flag travels with the published weights into a worker's actor.
    worker = type(algo).build_actor(algo.cfg, obs_dims, 1)
    flat_to_actor(worker, actor_to_flat(algo.actor))
    torch.manual_seed(0)
    action, _ = worker.rollout_actions(torch.zeros(4000, 4))
    assert action.min() < -0.95 and action.max() > 0.95  # uniform over [-1, 1]
    assert abs(float(action.mean())) < 0.05
    algo.update(_synthetic_batch(obs_dims, 1, 1.0))
    algo.update(_synthetic_batch(obs_dims, 1, 1.0))  # 384 >= 300 steps: learning starts
    assert float(algo.actor.explore_uniform) == 0.0 and algo.grad_steps == 2


def test_squashed_gaussian_log_prob_matches_torch_tanh_transform() -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, hidden=(16,))
    obs = torch.randn(200, 3)
    torch.manual_seed(1)
    action, logp = actor.sample(obs)
    mean, log_std = actor.mean_log_std(obs)
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        [torch.distributions.TanhTransform(cache_size=1)],
    )
    torch.manual_seed(1)
    ref_action = reference.rsample()
    torch.testing.assert_close(action, ref_action)
    inside = ref_action.abs().amax(-1) < 0.999  # away from float32 saturation
    torch.testing.assert_close(
        logp[inside], reference.log_prob(ref_action).sum(-1)[inside], atol=1e-3, rtol=1e-4
    )
    assert torch.equal(actor(obs), torch.tanh(mean))


def test_td3_exploration_noise_uses_per_env_scales_in_range() -> None:
    torch.manual_seed(0)
    actor = DeterministicActor(3, 2, hidden=(16,), noise_std_min=0.05, noise_std_max=0.3)
    obs = torch.randn(500, 3)
    action, logp = actor.rollout_actions(obs)
    assert action.abs().max() <= 1.0 and torch.equal(logp, torch.zeros(500))
    assert actor._noise_std is not None
    stds = actor._noise_std.squeeze(1)
    assert stds.min() >= 0.05 and stds.max() <= 0.3 and stds.std() > 0.05
    still = DeterministicActor(3, 2, hidden=(16,), noise_std_min=0.0, noise_std_max=0.0)
    assert torch.equal(still.rollout_actions(obs)[0], still(obs))
    with pytest.raises(ValueError, match="noise_std_min <= noise_std_max"):
        DeterministicActor(3, 2, noise_std_min=0.5, noise_std_max=0.1)


def test_c51_projection_keeps_mass_and_shifts_the_mean() -> None:
    critic = TwinQCritic(2, 1, hidden=(8,), num_atoms=51, v_min=-10.0, v_max=10.0)
    probs = torch.softmax(torch.randn(32, 51), -1)
    reward = torch.rand(32) * 2 - 1
    discount = torch.full((32,), 0.9)
    target = critic.project(probs, reward, discount)
    torch.testing.assert_close(target.sum(-1), torch.ones(32))
    # Inside the support the projection preserves the mean: E[r + d Z] = r + d E[Z].
    mean = (probs * critic.support).sum(-1)
    torch.testing.assert_close((target * critic.support).sum(-1), reward + 0.9 * mean)
    # A target beyond the support lands on its last atom.
    edge = critic.project(probs, torch.full((32,), 100.0), discount)
    torch.testing.assert_close(edge[:, -1], torch.ones(32))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algo.tau=0", "tau must be in"),
        ("algo.batch_size=0", "batch_size must be at least 1"),
        ("algo.nstep=0", "nstep must be at least 1"),
        ("algo.gamma=1.5", "gamma must be in"),
    ],
)
def test_bad_config_values_are_named(override: str, message: str) -> None:
    for name in ("sac", "td3"):
        with pytest.raises(ValueError, match=message):
            _make(name, [override], {"policy": 3}, 1)
