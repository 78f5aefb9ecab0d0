"""AWR by sampling: exact per-frame probabilities follow share_k exp(clip(A)/beta) / Z_k, drawn
frequencies match them, shares decay toward their floors (never below), and bad inputs are
refused with errors that name the value and the valid range."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from unilab.algos.awr_sampling import AWRSampler

DEMOS = np.array([1.0, 0.5, 3.0, -0.2, 0.0])  # 3.0 is clipped to 2
ROLLOUTS = np.array([-2.5, -1.0, 0.0, 0.3, 0.8, 1.5, -0.4, 2.0])  # -2.5 is clipped to -2


def _sampler(**kwargs: object) -> AWRSampler:
    args: dict[str, object] = {
        "sources": {"demos": DEMOS, "rollouts": ROLLOUTS},
        "beta": 0.8,
        "shares": {"demos": 3.0, "rollouts": 1.0},  # normalised to 0.75 / 0.25
        "floors": {"demos": 0.1, "rollouts": 0.25},
        "decay": 0.5,
    }
    args.update(kwargs)
    return AWRSampler(**args)  # type: ignore[arg-type]


def _formula(advantages: np.ndarray, beta: float, share: float) -> np.ndarray:
    w = np.exp(np.clip(advantages, -2.0, 2.0) / beta)
    return share * w / w.sum()


def test_probabilities_equal_the_formula() -> None:
    sampler = _sampler()
    probs = sampler.probabilities()
    np.testing.assert_allclose(probs["demos"], _formula(DEMOS, 0.8, 0.75), rtol=1e-12)
    np.testing.assert_allclose(probs["rollouts"], _formula(ROLLOUTS, 0.8, 0.25), rtol=1e-12)
    assert sum(p.sum() for p in probs.values()) == pytest.approx(1.0, abs=1e-12)
    # Clipping: demo advantage 3.0 weighs as 2.0, so against the 1.0 frame it is exp(1 / beta)
    # heavier, not exp(2 / beta).
    assert probs["demos"][2] / probs["demos"][0] == pytest.approx(np.exp(1.0 / 0.8))
    # A tiny beta neither overflows nor underflows to all zeros: the best frame takes the
    # whole share.
    sharp = _sampler(beta=1e-4).probabilities()
    assert sharp["demos"][2] == pytest.approx(0.75)
    assert np.isfinite(sharp["rollouts"]).all()
    assert sharp["rollouts"][7] == pytest.approx(0.25)


def test_drawn_frequencies_match_the_probabilities() -> None:
    sampler = _sampler()
    n = 200_000
    source, frame = sampler.sample(n, np.random.default_rng(0))
    assert source.shape == frame.shape == (n,)
    expected = np.concatenate([sampler.probabilities()[name] for name in sampler.names])
    offsets = np.array([0, DEMOS.size])
    counts = np.bincount(offsets[source] + frame, minlength=expected.size)
    assert counts.size == expected.size  # no frame index beyond its source
    observed = counts / n
    # Each frequency is binomial with std sqrt(p (1 - p) / n); 5 std per frame bounds the
    # chance of a false failure over these 13 frames to about 1e-5.
    tolerance = 5.0 * np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(observed - expected) <= tolerance), (observed, expected)


def test_frames_of_a_zero_share_source_are_never_drawn() -> None:
    sampler = _sampler(shares={"demos": 0.0, "rollouts": 1.0}, floors={})
    source, frame = sampler.sample(10_000, np.random.default_rng(1))
    assert np.all(source == sampler.names.index("rollouts"))
    assert frame.max() < ROLLOUTS.size


def test_shares_approach_floors_and_never_fall_below() -> None:
    sampler = _sampler(
        shares={"demos": 0.5, "rollouts": 0.5}, floors={"demos": 0.1, "rollouts": 0.4}
    )
    # One step by hand: demos 0.1 + 0.5 (0.5 - 0.1) = 0.3, rollouts 0.4 + 0.5 (0.5 - 0.4)
    # = 0.45; renormalised by 0.75 -> 0.4, 0.6.
    first = sampler.step()
    assert first["demos"] == pytest.approx(0.4)
    assert first["rollouts"] == pytest.approx(0.6)
    assert sampler.probabilities()["demos"].sum() == pytest.approx(0.4)
    history = [first] + [sampler.step() for _ in range(59)]
    # Floors sum to F = 0.5: the shares converge to f / F = 0.2 / 0.8, each above its floor,
    # the distance to the limit shrinking every iteration.
    assert all(h["demos"] >= 0.1 and h["rollouts"] >= 0.4 for h in history)
    gaps = [abs(h["demos"] - 0.2) for h in history]
    assert all(b < a for a, b in itertools.pairwise(gaps) if a > 1e-12)
    assert history[-1]["demos"] == pytest.approx(0.2, abs=1e-9)
    assert history[-1]["rollouts"] == pytest.approx(0.8, abs=1e-9)
    assert sampler.iteration == 60


def test_three_sources_converge_to_the_floor_proportions() -> None:
    sampler = AWRSampler(
        {"demos": DEMOS, "rollouts": ROLLOUTS, "takeovers": DEMOS},
        beta=1.0,
        shares={"demos": 0.6, "rollouts": 0.3, "takeovers": 0.1},
        floors={"demos": 0.3, "rollouts": 0.3, "takeovers": 0.1},  # F = 0.7
        decay=0.8,
    )
    for _ in range(200):
        sampler.step()
    limit = np.array([0.3, 0.3, 0.1]) / 0.7
    np.testing.assert_allclose([sampler.shares[k] for k in sampler.names], limit, atol=1e-9)


def test_decay_end_points_and_zero_floors() -> None:
    # decay 0 jumps to f / F at once; decay 1 never moves.
    jump = _sampler(
        shares={"demos": 0.5, "rollouts": 0.5}, floors={"demos": 0.1, "rollouts": 0.4}, decay=0.0
    )
    assert jump.step() == pytest.approx({"demos": 0.2, "rollouts": 0.8})
    still = _sampler(decay=1.0)
    assert still.step() == pytest.approx({"demos": 0.75, "rollouts": 0.25})
    # A source with floor 0 fades geometrically when another source has a floor: near the
    # limit by the factor decay / (F + decay (1 - F)) = 0.5 / 0.75 per iteration.
    fade = _sampler(shares={"demos": 0.5, "rollouts": 0.5}, floors={"rollouts": 0.5})
    demos = [fade.step()["demos"] for _ in range(40)]
    assert demos[-1] < 1e-6
    assert demos[-1] / demos[-2] == pytest.approx(2 / 3, rel=1e-6)
    # Every floor 0: renormalisation undoes the decay, the shares stay.
    none = _sampler(floors={})
    for _ in range(5):
        none.step()
    assert none.shares == pytest.approx({"demos": 0.75, "rollouts": 0.25})


def test_with_advantages_keeps_the_shares() -> None:
    sampler = _sampler()
    sampler.step()
    fresh = sampler.with_advantages({"demos": DEMOS[:2], "rollouts": ROLLOUTS[:3]})
    assert fresh.shares == pytest.approx(sampler.shares)
    assert fresh.iteration == 1
    assert fresh.probabilities()["demos"].size == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beta": 0.0}, r"beta must be a finite number > 0, got 0.0"),
        ({"beta": float("nan")}, r"beta must be a finite number > 0, got nan"),
        ({"decay": 1.5}, r"decay must be in \[0, 1\], got 1.5"),
        ({"sources": {}}, r"at least one source"),
        (
            {"sources": {"demos": np.array([]), "rollouts": ROLLOUTS}},
            r"source 'demos' has no frames",
        ),
        (
            {"sources": {"demos": np.array([0.1, np.nan]), "rollouts": ROLLOUTS}},
            r"source 'demos': advantage of frame 1 is nan",
        ),
        (
            {"shares": {"demos": -1.0, "rollouts": 1.0}},
            r"share of source 'demos' must be .*>= 0, got -1.0",
        ),
        ({"shares": {"demos": 0.0, "rollouts": 0.0}}, r"shares must sum to > 0"),
        ({"shares": {"demos": 1.0}}, r"shares are given for \['demos'\] but the sources are"),
        (
            {"floors": {"demos": 0.1, "rollouts": 0.3}},
            r"floor of source 'rollouts' must be in \[0, 0.25\] .*got 0.3",
        ),
        ({"floors": {"other": 0.1}}, r"floors given for unknown sources \['other'\]"),
    ],
)
def test_bad_inputs_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _sampler(**kwargs)


def test_draws_follow_the_shares_after_a_step() -> None:
    sampler = _sampler(
        shares={"demos": 0.5, "rollouts": 0.5},
        floors={"demos": 0.1, "rollouts": 0.4},
        decay=0.0,
    )
    rng = np.random.default_rng(2)
    before, _ = sampler.sample(20_000, rng)
    sampler.step()  # jumps to demos 0.2, rollouts 0.8
    after, _ = sampler.sample(20_000, rng)
    # Binomial std at n = 20k is at most 0.0036; 0.02 is over 5 std.
    assert abs(np.mean(before == 0) - 0.5) < 0.02
    assert abs(np.mean(after == 0) - 0.2) < 0.02
