"""Exploration tokens in rollouts: the learner's schedules (uniform, count, bandit) and the
per-episode sampler the workers run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unilab.algos.token_schedule import TokenSchedule
from unilab.policies.vla.tokens import TokenSampler


def test_bandit_moves_the_draws_to_the_better_token_and_keeps_a_floor() -> None:
    rng = np.random.default_rng(0)
    rates = np.array([0.2, 0.7, 0.4])
    schedule = TokenSchedule(3, "bandit", decay=0.95, floor=0.15, seed=1)
    for _ in range(40):
        probs = schedule.probs()
        tokens = rng.choice(3, size=24, p=probs)
        schedule.update(tokens, (rng.random(24) < rates[tokens]).astype(float))
    probs = schedule.probs()
    assert probs.argmax() == 1 and probs[1] > 0.6, probs
    assert probs.min() >= 0.15 / 3 - 1e-12 and probs.sum() == pytest.approx(1.0)
    assert schedule.mean_success().argmax() == 1


def test_count_schedule_favours_the_tokens_tried_least_and_uniform_never_moves() -> None:
    count = TokenSchedule(3, "count", decay=1.0, floor=0.0)
    count.update(np.array([0] * 9 + [1] * 3), np.zeros(12))
    probs = count.probs()
    assert probs[2] > probs[1] > probs[0]
    # 1 / (1 + n): 1/10, 1/4, 1 -> normalised
    np.testing.assert_allclose(probs, np.array([0.1, 0.25, 1.0]) / 1.35)
    uniform = TokenSchedule(4, "uniform")
    uniform.update(np.array([0, 0, 0]), np.ones(3))
    np.testing.assert_allclose(uniform.probs(), 0.25)


def test_schedule_state_round_trip_and_bad_input() -> None:
    a = TokenSchedule(2, "bandit")
    a.update(np.array([0, 1, 1]), np.array([1.0, 0.0, 1.0]))
    b = TokenSchedule(2, "bandit")
    b.load_state_dict(a.state_dict())
    np.testing.assert_allclose(b.mean_success(), a.mean_success())
    with pytest.raises(ValueError, match="not one of"):
        TokenSchedule(2, "greedy")
    with pytest.raises(ValueError, match=r"tokens must be in 0\.\.1"):
        a.update(np.array([2]), np.array([1.0]))


def test_sampler_holds_one_token_per_episode_drawn_from_the_published_probs() -> None:
    sampler = TokenSampler(4, seed=0)
    with torch.no_grad():
        sampler.probs.copy_(torch.tensor([0.0, 0.0, 1.0, 0.0]))
    first = sampler.tokens(6)
    assert (first == 2).all()
    with torch.no_grad():
        sampler.probs.copy_(torch.tensor([0.0, 0.0, 0.0, 1.0]))
    # no episode ended: every env keeps its token
    assert (sampler.tokens(6) == 2).all()
    ended = np.array([True, False, False, True, False, False])
    sampler.episodes_ended(ended)
    again = sampler.tokens(6)
    assert (again[ended] == 3).all() and (again[~ended] == 2).all()
    # The probs are a buffer: they travel with the published weights.
    assert "probs" in dict(sampler.named_buffers())
