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
    episode_progress_ranking,
    per_episode,
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
