"""Where the rollout budget goes: a reset-bin draw probability per bin, from the outcomes
of finished episodes.

A task with reset bins (`Task.num_reset_bins` > 1: target cells, object placements,
terrain levels) starts each episode in a bin drawn with these probabilities. An episode's
outcome is 1 or 0 (the task's `success` at its end, or return above a threshold). Episodes
whose outcomes in a bin are all 1 or all 0 teach a policy-gradient learner little, so
`thompson` puts the budget where outcomes are still mixed:

- per bin a Beta(a, b) posterior over the success probability p, starting at Beta(1, 1);
  each update that carries outcomes first decays the evidence (a - 1, b - 1 times
  `decay`), so the posterior tracks a policy that improves, then adds the new successes
  and failures. Updates without an ended episode leave it alone: episodes that start
  together end together, so outcomes arrive in bursts many iterations apart, and decaying
  on every iteration forgot most of a burst before the next one came;
- each publish draws p_k ~ Beta(a_k, b_k) per bin (Thompson sampling), scores the bin by
  the outcome variance p_k (1 - p_k) and normalises the scores to a share; the published
  share is the mean over `draws` such draws. One publish sets the bins of every episode
  that starts before the next, often all of them at once, so a single draw swung whole
  bursts onto one bin (0.81 of the budget, then 0.08);
- probabilities = floor / B for every bin (none starves: its posterior keeps moving) plus
  (1 - floor) times the share.

`uniform` keeps 1 / B for every bin (the posteriors still update, for logging).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODES = ("uniform", "thompson")


@dataclass
class BinStats:
    """Outcomes of the episodes that ended in one update, per bin."""

    episodes: np.ndarray
    """(B,) episodes per bin."""
    successes: np.ndarray
    """(B,) episodes with outcome 1 per bin."""


class BinAllocator:
    def __init__(
        self,
        num_bins: int,
        mode: str = "thompson",
        *,
        decay: float = 0.9,
        floor: float = 0.2,
        draws: int = 256,
        seed: int = 0,
    ) -> None:
        if num_bins < 1:
            raise ValueError(f"num_bins must be >= 1, got {num_bins}")
        if mode not in MODES:
            raise ValueError(f"allocation {mode!r} is not one of {', '.join(MODES)}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"allocation decay must be in (0, 1], got {decay}")
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"allocation floor must be in [0, 1], got {floor}")
        if draws < 1:
            raise ValueError(f"allocation draws must be >= 1, got {draws}")
        self.num_bins = int(num_bins)
        self.draws = int(draws)
        self.mode = mode
        self.decay = float(decay)
        self.floor = float(floor)
        self.alpha: np.ndarray = np.ones(self.num_bins)
        self.beta: np.ndarray = np.ones(self.num_bins)
        self.rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(7,)))
        self.probs: np.ndarray = np.full(self.num_bins, 1.0 / self.num_bins)
        """The probabilities last published (`draw_probs`)."""

    def update(self, bins: np.ndarray, outcomes: np.ndarray) -> BinStats:
        """Decay the evidence once, then add the outcomes (0/1) of episodes ended in `bins`
        (ints in [0, B); -1 entries, steps where no episode ended, are ignored). Without
        any ended episode nothing changes."""
        bins = np.asarray(bins, dtype=np.int64).reshape(-1)
        outcomes = np.asarray(outcomes, dtype=np.float64).reshape(-1)
        if bins.shape != outcomes.shape:
            raise ValueError(f"{bins.size} bins but {outcomes.size} outcomes")
        keep = bins >= 0
        bins, outcomes = bins[keep], outcomes[keep]
        if bins.size and int(bins.max()) >= self.num_bins:
            raise ValueError(f"bin {int(bins.max())} is outside [0, {self.num_bins})")
        episodes = np.bincount(bins, minlength=self.num_bins).astype(np.float64)
        successes = np.bincount(bins, weights=outcomes, minlength=self.num_bins)
        if bins.size == 0:
            return BinStats(episodes, successes)
        self.alpha = 1.0 + self.decay * (self.alpha - 1.0) + successes
        self.beta = 1.0 + self.decay * (self.beta - 1.0) + (episodes - successes)
        return BinStats(episodes, successes)

    @property
    def mean_success(self) -> np.ndarray:
        """(B,) posterior mean success probability per bin."""
        return self.alpha / (self.alpha + self.beta)

    def draw_probs(self) -> np.ndarray:
        """(B,) float32 bin probabilities for the next rollouts (sums to 1)."""
        b = self.num_bins
        probs: np.ndarray
        if self.mode == "uniform" or b == 1:
            probs = np.full(b, 1.0 / b)
        else:
            p = self.rng.beta(self.alpha, self.beta, size=(self.draws, b))
            score = p * (1.0 - p)
            total = score.sum(axis=1, keepdims=True)
            share = np.where(total > 0, score / np.maximum(total, 1e-300), 1.0 / b).mean(axis=0)
            probs = self.floor / b + (1.0 - self.floor) * share
        self.probs = probs / probs.sum()
        return self.probs.astype(np.float32)

    # -- checkpoint ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, object]:
        return {
            "alpha": self.alpha.tolist(),
            "beta": self.beta.tolist(),
            "probs": self.probs.tolist(),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        alpha = np.asarray(state["alpha"], dtype=np.float64)
        if alpha.shape != (self.num_bins,):
            raise ValueError(
                f"allocation state holds {alpha.size} bins; this task has {self.num_bins}"
            )
        self.alpha = alpha
        self.beta = np.asarray(state["beta"], dtype=np.float64)
        self.probs = np.asarray(state["probs"], dtype=np.float64)
        self.rng.bit_generator.state = state["rng"]  # type: ignore[assignment]
