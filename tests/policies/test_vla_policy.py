"""The VLA policy: flow-matching conventions, deterministic chunks for a fixed noise, the
zero-initialised conditions and their null path, guidance at s = 1, flow-noise chains whose
log-probability matches a direct Gaussian computation, and clear errors on bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.flow import interpolate, sample_time, time_grid
from unilab.policies.vla.policy import VLAPolicy

INPUTS = VLAInputs(
    proprio_dim=5, action_dim=3, cameras={"front": (16, 16)}, vocab_size=9, pad_id=0,
    instruction_len=4,
)  # fmt: skip


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def small_config(**overrides: object) -> VLAConfig:
    base: dict[str, object] = dict(
        horizon=4, num_steps=3, n_act=2, width=32, heads=2, prefix_layers=1, expert_layers=1,
        image_channels=[8, 16], image_tokens_side=2,
    )  # fmt: skip
    base.update(overrides)
    return VLAConfig(**base)  # type: ignore[arg-type]


def observations(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "policy": torch.randn(n, 5, generator=g),
        "images/front": torch.randint(0, 256, (n, 16, 16, 3), generator=g).to(torch.uint8),
        "instruction": torch.tensor([[3, 4, 5, 0]] * n),
    }


def randomize_zero_inits(policy: VLAPolicy, seed: int = 0) -> VLAPolicy:
    """Give the zero-initialised parameters (adaLN, conditions, heads) random values, so a
    test sees every path of the network and not the identity it starts as."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            if p.abs().sum() == 0:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return policy.eval()


def test_time_schedule_and_interpolation_follow_pi0() -> None:
    g = torch.Generator().manual_seed(0)
    t = sample_time(50_000, generator=g)
    assert float(t.min()) >= 0.001 and float(t.max()) <= 1.0
    # Beta(1.5, 1) * 0.999 + 0.001 has mean 0.6 * 0.999 + 0.001 and P(u < 0.5) = 0.5^1.5.
    assert abs(float(t.mean()) - (0.6 * 0.999 + 0.001)) < 5e-3
    u = (t - 0.001) / 0.999
    assert abs(float((u < 0.5).float().mean()) - 0.5**1.5) < 1e-2
    actions, noise = torch.randn(4, 2, 3), torch.randn(4, 2, 3)
    x_t, target = interpolate(actions, noise, torch.tensor([0.0, 1.0, 0.25, 0.5]))
    torch.testing.assert_close(x_t[0], actions[0])  # t = 0: the actions
    torch.testing.assert_close(x_t[1], noise[1])  # t = 1: pure noise
    torch.testing.assert_close(x_t[2], 0.25 * noise[2] + 0.75 * actions[2])
    torch.testing.assert_close(target, noise - actions)
    torch.testing.assert_close(time_grid(4), torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]))


def test_chunk_with_fixed_noise_is_deterministic_and_depends_on_noise() -> None:
    torch.manual_seed(0)
    policy = randomize_zero_inits(VLAPolicy(INPUTS, small_config()))
    obs = observations(6)
    noise = torch.randn(6, 4, 3)
    a1, logp = policy.sample(obs, noise=noise)
    a2, _ = policy.sample(obs, noise=noise.clone())
    assert a1.shape == (6, 4, 3) and logp is None
    torch.testing.assert_close(a1, a2, rtol=0, atol=0)
    a3, _ = policy.sample(obs, noise=noise + 1.0)
    assert float((a3 - a1).abs().max()) > 1e-3
    # A batch of one gives the same chunk as its row in the batch.
    one, _ = policy.sample({k: v[2:3] for k, v in obs.items()}, noise=noise[2:3])
    torch.testing.assert_close(one[0], a1[2], rtol=0, atol=1e-5)
    # The Euler integration by hand: K steps of dt = -1/K on the grid, from the noise.
    with torch.no_grad():
        ctx = policy.context(obs)
        x, grid = noise, time_grid(3)
        for k in range(3):
            x = x + (-1.0 / 3) * policy.expert(ctx, x, grid[k].expand(6))[0]  # type: ignore[misc]
        torch.testing.assert_close(policy.action_norm.unnormalize(x), a1, rtol=0, atol=1e-5)


def test_fresh_conditions_change_nothing_and_trained_ones_do() -> None:
    torch.manual_seed(0)
    policy = VLAPolicy(INPUTS, small_config(n_tokens=3, advantage=True)).eval()
    obs, noise = observations(5), torch.randn(5, 4, 3)
    null, _ = policy.sample(obs, noise=noise)  # no token, no advantage: null
    for token in (0, 2):
        cond, _ = policy.sample({**obs, "token": torch.full((5,), token)}, noise=noise)
        torch.testing.assert_close(cond, null, rtol=0, atol=0)  # zero-initialised
    randomize_zero_inits(policy)
    null, _ = policy.sample(obs, noise=noise)
    explicit_null, _ = policy.sample(
        {**obs, "token": torch.full((5,), -1), "advantage": torch.full((5,), -1)}, noise=noise
    )
    torch.testing.assert_close(explicit_null, null, rtol=0, atol=0)
    t0, _ = policy.sample({**obs, "token": torch.zeros(5, dtype=torch.long)}, noise=noise)
    t2, _ = policy.sample({**obs, "token": torch.full((5,), 2)}, noise=noise)
    assert float((t0 - null).abs().max()) > 1e-3 and float((t2 - t0).abs().max()) > 1e-3


def test_guidance_at_scale_one_is_the_conditional_policy() -> None:
    torch.manual_seed(0)
    policy = randomize_zero_inits(
        VLAPolicy(INPUTS, small_config(advantage=True, n_tokens=2, guidance_drop=["advantage"]))
    )
    obs = {
        **observations(7),
        "advantage": torch.ones(7, dtype=torch.long),
        "token": torch.ones(7, dtype=torch.long),
    }
    noise = torch.randn(7, 4, 3)
    with torch.no_grad():
        conditional = policy.sample_normalized(obs, noise, guidance_scale=None)
        guided_1 = policy.sample_normalized(obs, noise, guidance_scale=1.0)
        guided_0 = policy.sample_normalized(obs, noise, guidance_scale=0.0)
        uncond = policy.sample_normalized(
            {**obs, "advantage": -torch.ones(7, dtype=torch.long)}, noise
        )
        guided_2 = policy.sample_normalized(obs, noise, guidance_scale=2.0)
    torch.testing.assert_close(guided_1, conditional, rtol=0, atol=1e-5)
    torch.testing.assert_close(guided_0, uncond, rtol=0, atol=1e-5)  # s = 0: advantage nulled
    assert float((guided_2 - conditional).abs().max()) > 1e-3
    # The configured scale is what the deterministic (export) path uses.
    policy.cfg.guidance_scale = 2.0
    with torch.no_grad():
        torch.testing.assert_close(
            policy.action_norm.normalize(policy(obs, noise)), guided_2, rtol=0, atol=1e-5
        )


def test_flow_noise_chain_log_prob_matches_a_direct_gaussian_computation() -> None:
    torch.manual_seed(0)
    cfg = small_config(flow_noise=True, noise_std_min=0.05, noise_std_max=0.3)
    policy = randomize_zero_inits(VLAPolicy(INPUTS, cfg))
    obs = observations(4)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        chain = policy.sample_chain(obs, generator=g)
    k = cfg.num_steps
    assert chain.states.shape == (4, k + 1, 4, 3) and chain.log_prob.shape == (4, 4)
    # Direct: each step is N(x_k + dt v(x_k, t_k), sigma_k^2) with torch.distributions.
    with torch.no_grad():
        ctx = policy.context(obs)
        grid = time_grid(k)
        expected = torch.distributions.Normal(0.0, 1.0).log_prob(chain.states[:, 0]).sum(-1)
        for i in range(k):
            v, hidden = policy.expert(ctx, chain.states[:, i], grid[i].expand(4))  # type: ignore[misc]
            std = policy.noise_head(hidden).exp()  # type: ignore[misc]
            assert float(std.min()) >= 0.05 - 1e-6 and float(std.max()) <= 0.3 + 1e-6
            step = torch.distributions.Normal(chain.states[:, i] - v / k, std)
            expected = expected + step.log_prob(chain.states[:, i + 1]).sum(-1)
    torch.testing.assert_close(chain.log_prob, expected, rtol=1e-5, atol=1e-3)
    # Recomputation under the same parameters (all K steps in one batch) agrees, and is
    # differentiable; under changed parameters it moves.
    recomputed = policy.chain_log_prob(obs, chain.states)
    torch.testing.assert_close(recomputed.detach(), chain.log_prob, rtol=1e-5, atol=1e-3)
    recomputed.sum().backward()
    assert policy.noise_head is not None
    grad = policy.noise_head.net[-1].weight.grad  # type: ignore[union-attr]
    assert grad is not None and float(grad.abs().sum()) > 0
    with torch.no_grad():
        policy.noise_head.net[-1].bias.add_(0.5)  # type: ignore[union-attr, operator]
        moved = policy.chain_log_prob(obs, chain.states)
    assert float((moved - chain.log_prob).abs().max()) > 1e-2
    # act() returns the executed chain's total log-prob; deterministic act has none.
    _, logp = policy.sample(obs, generator=torch.Generator().manual_seed(1))
    assert logp is not None and logp.shape == (4,)
    torch.testing.assert_close(
        logp,
        policy.sample_chain(obs, generator=torch.Generator().manual_seed(1))
        .log_prob.sum(-1)
        .detach(),
    )
    assert policy.sample(obs, deterministic=True)[1] is None
    assert math.isfinite(float(logp.sum()))


def test_mse_head_is_a_gaussian_over_its_mean() -> None:
    torch.manual_seed(0)
    policy = randomize_zero_inits(VLAPolicy(INPUTS, small_config(), head="mse"))
    obs, noise = observations(3), torch.randn(3, 4, 3)
    mean, none = policy.sample(obs, deterministic=True)
    sample, logp = policy.sample(obs, noise=noise)
    assert none is None and logp is not None
    std = policy.gaussian.log_std.exp()  # type: ignore[union-attr]
    torch.testing.assert_close(
        policy.action_norm.normalize(sample), policy.action_norm.normalize(mean) + std * noise
    )
    direct = torch.distributions.Normal(policy.action_norm.normalize(mean), std.expand(3, 4, 3))
    torch.testing.assert_close(
        logp, direct.log_prob(policy.action_norm.normalize(sample)).sum((1, 2)), atol=1e-4, rtol=0
    )


def test_bad_observations_get_clear_errors() -> None:
    policy = VLAPolicy(INPUTS, small_config(n_tokens=2)).eval()
    obs = observations(2)
    with pytest.raises(ValueError, match="missing \\['instruction'\\]"):
        policy.sample({k: v for k, v in obs.items() if k != "instruction"})
    with pytest.raises(ValueError, match=r"images/front.*expected \(2, 16, 16, 3\)"):
        policy.sample({**obs, "images/front": obs["images/front"][:, :8]})
    with pytest.raises(ValueError, match="instruction ids must be in \\[0, 9\\)"):
        policy.sample({**obs, "instruction": torch.full((2, 4), 9)})
    with pytest.raises(ValueError, match="'token' must be"):
        policy.sample({**obs, "token": torch.full((2,), 2)})
    with pytest.raises(ValueError, match="noise has shape"):
        policy.sample(obs, noise=torch.zeros(2, 3, 3))
    with pytest.raises(ValueError, match="n_act 5 exceeds the chunk horizon 4"):
        VLAPolicy(INPUTS, small_config(n_act=5))
    with pytest.raises(ValueError, match="pad_id 9 is outside"):
        VLAPolicy(VLAInputs(3, 2, vocab_size=9, pad_id=9, instruction_len=2), small_config())
    with pytest.raises(ValueError, match="flow_noise=True"):
        policy.sample_chain(obs)
    with pytest.raises(ValueError, match="guidance needs a condition"):
        policy.sample_normalized(obs, torch.zeros(2, 4, 3), guidance_scale=2.0)


def test_uint8_and_unit_float_images_encode_alike() -> None:
    torch.manual_seed(0)
    policy = randomize_zero_inits(VLAPolicy(INPUTS, small_config()))
    obs, noise = observations(2), torch.randn(2, 4, 3)
    as_float = {**obs, "images/front": obs["images/front"].float() / 255.0}
    with torch.no_grad():
        np.testing.assert_allclose(
            policy(obs, noise).numpy(), policy(as_float, noise).numpy(), atol=1e-5
        )
