"""Calibration of the value heads (issue 16), in plain numpy: is P(success) a probability
(Brier score, reliability bins), and does predicted progress order episodes the way their
true progress does (Spearman rank correlation over episodes)? And the fix when it is not a
probability: Platt scaling, sigmoid(a z + b) of the head's logit z, fitted on held-out
episodes (`fit_platt`; `cross_fitted_platt` scores it on episodes the fit never saw).

Spearman is computed here (Pearson correlation of average ranks) rather than taken from
scipy, which unilab does not depend on. `plot_reliability` draws the reliability diagram
with matplotlib (a dev/bench extra, imported when called).
"""

from __future__ import annotations

import os
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

EpisodeReduce = Literal["last", "max", "mean"]


def _flat(x: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} holds non-finite values")
    return arr


def _same_length(a: np.ndarray, b: np.ndarray, names: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{names} must have the same length, got {a.size} and {b.size}")
    if a.size == 0:
        raise ValueError(f"{names} are empty")


def brier_score(p: ArrayLike, y: ArrayLike) -> float:
    """Mean squared error of probabilities `p` against outcomes `y` (0 or 1): 0 is perfect,
    a constant p = mean(y) scores mean(y) (1 - mean(y))."""
    pa, ya = _flat(p, "p"), _flat(y, "y")
    _same_length(pa, ya, "p and y")
    if pa.min() < 0 or pa.max() > 1:
        raise ValueError(f"p must be probabilities in [0, 1], got [{pa.min()}, {pa.max()}]")
    return float(np.mean((pa - ya) ** 2))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


def _bce(theta: np.ndarray, z: np.ndarray, y: np.ndarray, ridge: float) -> float:
    u = theta[0] * z + theta[1]
    # log(1 + e^u) - y u, written to stay finite for large |u|
    loss = np.mean(np.logaddexp(0.0, u) - y * u)
    return float(loss + 0.5 * ridge * ((theta[0] - 1.0) ** 2 + theta[1] ** 2))


def fit_platt(
    logits: ArrayLike, outcomes: ArrayLike, ridge: float = 1e-4, iters: int = 100
) -> tuple[float, float]:
    """Platt scaling: (a, b) minimising the binary cross-entropy of sigmoid(a z + b)
    against the outcomes (0 or 1), by damped Newton steps from (1, 0), with a small ridge
    pull toward (1, 0) so the fit stays finite when the logits separate the outcomes, and
    a >= 0: a head whose ranking is wrong on held-out data becomes the constant base rate
    (a = 0), never its own inverse.

    Why it is needed: a success head trained on a few hundred episodes learns which
    episode a frame comes from and pushes its logits to +-10 and beyond; its *ranking*
    still carries signal, and a ~10x smaller scale turns it into probabilities
    (`bench/results/value_heads_*`). Raises ValueError when every outcome is the same."""
    z, y = _flat(logits, "logits"), _flat(outcomes, "outcomes")
    _same_length(z, y, "logits and outcomes")
    if y.min() == y.max():
        raise ValueError(
            f"Platt scaling needs both outcomes among the frames; all {z.size} are {y[0]:g}"
        )
    x = np.stack([z, np.ones_like(z)], axis=1)
    theta = np.array([1.0, 0.0])
    loss = _bce(theta, z, y, ridge)
    for _ in range(iters):
        p = _sigmoid(x @ theta)
        grad = x.T @ (p - y) / z.size + ridge * (theta - np.array([1.0, 0.0]))
        hess = (x * (p * (1 - p))[:, None]).T @ x / z.size + ridge * np.eye(2)
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale > 1e-6:  # halve the step until the loss does not rise
            trial = theta - scale * step
            trial[0] = max(trial[0], 0.0)  # a >= 0: a head never gets its sign flipped
            trial_loss = _bce(trial, z, y, ridge)
            if trial_loss <= loss:
                break
            scale *= 0.5
        else:
            break
        converged = loss - trial_loss < 1e-12
        theta, loss = trial, trial_loss
        if converged:
            break
    return float(theta[0]), float(theta[1])


def platt(logits: ArrayLike, a: float, b: float) -> np.ndarray:
    """sigmoid(a z + b): the calibrated probabilities of logits z."""
    return _sigmoid(a * _flat(logits, "logits") + b)


def cross_fitted_platt(
    logits: ArrayLike, outcomes: ArrayLike, episode_ids: ArrayLike, folds: int = 2, seed: int = 0
) -> np.ndarray:
    """Out-of-fold calibrated probabilities: the episodes are shuffled (seeded) into
    `folds` groups, and each group's frames are scaled by the Platt fit on the others, so
    no frame is scored by a fit that saw its episode. The honest score of calibration."""
    z, y = _flat(logits, "logits"), _flat(outcomes, "outcomes")
    _same_length(z, y, "logits and outcomes")
    ids = np.asarray(episode_ids).reshape(-1)
    if ids.shape != z.shape:
        raise ValueError(f"episode_ids has {ids.size} entries for {z.size} logits")
    episodes = np.unique(ids)
    if not 2 <= folds <= episodes.size:
        raise ValueError(f"folds={folds} must be in [2, episodes={episodes.size}]")
    order = np.random.default_rng(seed).permutation(episodes)
    group = dict(zip(order.tolist(), (np.arange(episodes.size) % folds).tolist(), strict=True))
    frame_group = np.array([group[e] for e in ids.tolist()])
    out = np.empty_like(z)
    for k in range(folds):
        test = frame_group == k
        a, b = fit_platt(z[~test], y[~test])
        out[test] = platt(z[test], a, b)
    return out


def reliability_bins(
    p: ArrayLike, y: ArrayLike, n_bins: int = 10
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Equal-width bins of [0, 1] over the predicted probabilities -> (bin centers, mean
    predicted, observed frequency of y = 1, counts), each (n_bins,). Empty bins have NaN
    means and count 0. p = 1 falls in the last bin."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    pa, ya = _flat(p, "p"), _flat(y, "y")
    _same_length(pa, ya, "p and y")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.clip(np.searchsorted(edges, pa, side="right") - 1, 0, n_bins - 1)
    counts = np.bincount(which, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_pred = np.bincount(which, weights=pa, minlength=n_bins) / counts
        observed = np.bincount(which, weights=ya, minlength=n_bins) / counts
    centers = (edges[:-1] + edges[1:]) / 2
    return centers, mean_pred, observed, counts.astype(np.int64)


def average_ranks(x: ArrayLike) -> np.ndarray:
    """Ranks 1..n of `x`, tied values sharing the mean of the ranks they span."""
    xa = _flat(x, "x")
    order = np.argsort(xa, kind="stable")
    ordered = xa[order]
    # Start of each run of equal values; a run's average rank is (first + last) / 2.
    new_run = np.r_[True, ordered[1:] != ordered[:-1]]
    run_id = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    ends = np.r_[starts[1:], xa.size]
    run_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(xa.size, dtype=np.float64)
    ranks[order] = run_rank[run_id]
    return ranks


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman rank correlation (Pearson correlation of average ranks, so ties count as
    ties); NaN when either side is constant (no ranking to compare)."""
    xa, ya = _flat(x, "x"), _flat(y, "y")
    _same_length(xa, ya, "x and y")
    rx, ry = average_ranks(xa), average_ranks(ya)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = float(np.sqrt((rx**2).sum() * (ry**2).sum()))
    return float((rx * ry).sum() / denom) if denom > 0 else float("nan")


def per_episode(
    values: ArrayLike, episode_ids: ArrayLike, reduce: EpisodeReduce = "last"
) -> tuple[np.ndarray, np.ndarray]:
    """One value per episode -> (sorted episode ids, values): the episode's `last` frame
    (frames in their given order), its `max` or its `mean`."""
    va = _flat(values, "values")
    ids = np.asarray(episode_ids).reshape(-1)
    if ids.shape != va.shape:
        raise ValueError(
            f"values and episode_ids must have the same length, got {va.size} and {ids.size}"
        )
    episodes, inverse = np.unique(ids, return_inverse=True)
    if reduce == "last":
        last = np.zeros(episodes.size, dtype=np.int64)
        last[inverse] = np.arange(va.size)  # later frames overwrite earlier ones
        return episodes, va[last]
    if reduce == "max":
        out = np.full(episodes.size, -np.inf)
        np.maximum.at(out, inverse, va)
        return episodes, out
    if reduce == "mean":
        return episodes, np.bincount(inverse, weights=va) / np.bincount(inverse)
    raise ValueError(f"unknown reduce {reduce!r}; valid: last, max, mean")


def episode_progress_ranking(
    pred_progress_per_frame: ArrayLike,
    episode_ids: ArrayLike,
    true_progress_per_episode: ArrayLike,
    reduce: EpisodeReduce = "last",
) -> float:
    """Spearman correlation over episodes between predicted progress (one value per episode
    from its frames, see `per_episode`) and `true_progress_per_episode`, given in the order
    of the sorted unique episode ids. For mixed failed and successful episodes pass the
    expected progress P(success) x progress per frame (the progress head alone is trained
    on successful episodes only)."""
    episodes, pred = per_episode(pred_progress_per_frame, episode_ids, reduce)
    truth = _flat(true_progress_per_episode, "true_progress_per_episode")
    if truth.size != episodes.size:
        raise ValueError(
            f"true_progress_per_episode has {truth.size} values for {episodes.size} episodes "
            "(one per sorted unique episode id)"
        )
    return spearman(pred, truth)


def plot_reliability(
    path: str | os.PathLike[str],
    p: ArrayLike,
    y: ArrayLike,
    n_bins: int = 10,
    title: str = "P(success) reliability",
) -> None:
    """Write a reliability diagram (observed frequency vs mean predicted probability per
    bin, the diagonal, and the frame count per bin below) as a PNG at `path`."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(
            "plot_reliability needs matplotlib: pip install 'unilab[dev]' (or matplotlib)"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    centers, mean_pred, observed, counts = reliability_bins(p, y, n_bins)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(5, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    top.plot([0, 1], [0, 1], "k--", lw=1, label="perfectly calibrated")
    filled = counts > 0
    top.plot(mean_pred[filled], observed[filled], "o-", label="value head")
    top.set_ylabel("observed success frequency")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.set_title(f"{title} (Brier {brier_score(p, y):.3f})")
    top.legend(loc="upper left")
    bottom.bar(centers, counts, width=1.0 / n_bins, edgecolor="k")
    bottom.set_xlabel("predicted P(success)")
    bottom.set_ylabel("frames")
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=100)
    plt.close(fig)
