"""Calibration metrics of the value heads against hand-computed values: Brier score,
Spearman with ties (average ranks), reliability bins of a perfectly calibrated set, the
per-episode progress ranking, and the reliability PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from unilab.algos.value_calibration import (
    average_ranks,
    brier_score,
    cross_fitted_platt,
    episode_progress_ranking,
    fit_platt,
    per_episode,
    platt,
    plot_reliability,
    reliability_bins,
    spearman,
)


def test_brier_score_by_hand() -> None:
    # (0.9-1)^2 + (0.2-0)^2 + (0.6-1)^2 + (0.5-0)^2 = 0.01 + 0.04 + 0.16 + 0.25 = 0.46
    assert brier_score([0.9, 0.2, 0.6, 0.5], [1, 0, 1, 0]) == pytest.approx(0.46 / 4)
    assert brier_score([1.0, 0.0], [1, 0]) == 0.0
    # The constant predictor p = mean(y) scores mean(y) (1 - mean(y)).
    y = np.array([1, 1, 1, 0])
    assert brier_score(np.full(4, 0.75), y) == pytest.approx(0.75 * 0.25)
    with pytest.raises(ValueError, match="same length"):
        brier_score([0.5], [1, 0])
    with pytest.raises(ValueError, match="probabilities in \\[0, 1\\]"):
        brier_score([1.5], [1])


def test_average_ranks_and_spearman_with_ties() -> None:
    np.testing.assert_array_equal(average_ranks([10, 20, 20, 5]), [2.0, 3.5, 3.5, 1.0])
    np.testing.assert_array_equal(average_ranks([3, 3, 3]), [2.0, 2.0, 2.0])
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [1, 8, 27, 64, 125]) == pytest.approx(1.0)  # monotone
    # Ties by hand: x ranks [1, 2.5, 2.5, 4], y ranks [1, 2, 3, 4]; centred: x [-1.5, 0, 0,
    # 1.5], y [-1.5, -0.5, 0.5, 1.5]; sum xy = 4.5; |x|^2 = 4.5, |y|^2 = 5 -> 4.5 / sqrt(22.5)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / np.sqrt(22.5))
    # Hand example without ties: d = [1, -1, 1, -1, 0] -> 1 - 6 * 4 / (5 * 24) = 0.8
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))  # no ranking on one side


def test_reliability_bins_of_a_perfectly_calibrated_set() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, 200_000)
    y = (rng.uniform(0, 1, p.size) < p).astype(float)  # y ~ Bernoulli(p): calibrated
    centers, mean_pred, observed, counts = reliability_bins(p, y, n_bins=5)
    np.testing.assert_allclose(centers, [0.1, 0.3, 0.5, 0.7, 0.9])
    np.testing.assert_allclose(mean_pred, centers, atol=0.005)
    np.testing.assert_allclose(observed, mean_pred, atol=0.01)
    assert counts.sum() == p.size and counts.min() > 35_000
    # Edges: p = 1 lands in the last bin, p = 0 in the first; empty bins are NaN with count 0.
    _, mean_pred, observed, counts = reliability_bins([0.0, 1.0, 1.0], [0, 1, 0], n_bins=4)
    np.testing.assert_array_equal(counts, [1, 0, 0, 2])
    assert observed[3] == 0.5 and np.isnan(mean_pred[1])


def test_episode_progress_ranking() -> None:
    episodes = np.array([7, 7, 7, 3, 3, 9, 9, 9, 9])
    pred = np.array([0.1, 0.5, 0.9, 0.2, 0.4, 0.1, 0.2, 0.3, 0.35])
    ids, last = per_episode(pred, episodes, "last")
    np.testing.assert_array_equal(ids, [3, 7, 9])
    np.testing.assert_allclose(last, [0.4, 0.9, 0.35])
    np.testing.assert_allclose(per_episode(pred, episodes, "max")[1], [0.4, 0.9, 0.35])
    np.testing.assert_allclose(per_episode(pred, episodes, "mean")[1], [0.3, 0.5, 0.2375])
    # Truth per sorted episode id (3, 7, 9): agreeing order -> 1, reversed -> -1.
    assert episode_progress_ranking(pred, episodes, [0.5, 1.0, 0.3]) == pytest.approx(1.0)
    assert episode_progress_ranking(pred, episodes, [0.5, 0.1, 0.9]) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="3 episodes"):
        episode_progress_ranking(pred, episodes, [0.5, 1.0])
    with pytest.raises(ValueError, match="valid: last, max, mean"):
        per_episode(pred, episodes, "median")  # type: ignore[arg-type]


def test_plot_reliability_writes_a_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    p = rng.uniform(0, 1, 500)
    path = tmp_path / "reliability.png"
    plot_reliability(path, p, (rng.uniform(0, 1, 500) < p).astype(float), n_bins=8)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_platt_fit_recovers_a_known_scale_and_bias() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 3.0, 40_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-(0.3 * z - 0.5)))).astype(float)
    a, b = fit_platt(z, y)
    assert a == pytest.approx(0.3, abs=0.02) and b == pytest.approx(-0.5, abs=0.05)
    assert np.allclose(platt(z, a, b), 1 / (1 + np.exp(-(a * z + b))))
    # separable outcomes stay finite (the ridge), a reversed head becomes the base rate
    sep_a, sep_b = fit_platt(np.array([-2.0, -1.0, 1.0, 2.0]), np.array([0, 0, 1, 1.0]))
    assert np.isfinite([sep_a, sep_b]).all() and sep_a > 1
    rev_a, rev_b = fit_platt(-z, y)
    assert rev_a == 0.0
    assert platt(-z[:3], rev_a, rev_b) == pytest.approx(np.full(3, y.mean()), abs=0.01)
    with pytest.raises(ValueError, match="both outcomes"):
        fit_platt(z[:10], np.ones(10))


def test_cross_fitted_platt_fixes_an_overconfident_head_out_of_sample() -> None:
    """A head 10x too sure of itself: raw Brier far above the truth's, the cross-fitted
    probabilities close to it, and each fold scored by a fit on the other episodes only."""
    rng = np.random.default_rng(1)
    episodes = np.repeat(np.arange(200), 50)
    true_logit = np.repeat(rng.normal(0.0, 1.5, 200), 50)
    y = np.repeat((rng.random(200) < 1 / (1 + np.exp(-true_logit[::50]))).astype(float), 50)
    z = 10.0 * true_logit
    truth = brier_score(1 / (1 + np.exp(-true_logit)), y)
    raw = brier_score(platt(z, 1.0, 0.0), y)
    crossed = cross_fitted_platt(z, y, episodes, folds=2, seed=0)
    assert raw > truth + 0.07
    assert brier_score(crossed, y) < raw - 0.07
    assert brier_score(crossed, y) == pytest.approx(truth, abs=0.01)
    # out of sample: with one episode per fold, an episode's own outcome cannot move its
    # own probabilities
    loo = cross_fitted_platt(z, y, episodes, folds=200)
    flipped = y.copy()
    flipped[episodes == 7] = 1.0 - flipped[episodes == 7]
    loo_flipped = cross_fitted_platt(z, flipped, episodes, folds=200)
    assert np.array_equal(loo[episodes == 7], loo_flipped[episodes == 7])
    assert not np.allclose(loo[episodes != 7], loo_flipped[episodes != 7])
    with pytest.raises(ValueError, match="folds"):
        cross_fitted_platt(z, y, episodes, folds=1)
