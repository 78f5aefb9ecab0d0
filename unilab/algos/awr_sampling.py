"""Advantage-weighted regression by sampling: draw frames in proportion to exp(A / beta).

AWR multiplies each frame's behaviour-cloning loss by exp(A / beta). Sampling frames with
that probability instead gives the same expected gradient with unweighted batches: no
frame's loss is scaled by a large factor (lower gradient variance), and the loss code of
`bc_flow` stays as it is. Advantages are clipped to [-clip, clip] (default 2) before the
exponential, so the weight of any frame is at most exp(2 clip / beta) times another's.

Frames come from named sources (e.g. "demos", "rollouts", "interventions"). Each source k
holds a share s_k of every batch; within a source, frame i is drawn with probability
w_i / sum_j w_j, w_i = exp(clip(A_i) / beta), so frame i's overall probability is
s_k w_i / sum_j w_j. Each improvement iteration (`step`) moves the shares toward floors:

    s_k <- f_k + decay (s_k - f_k),   then s <- s / sum(s).

Renormalisation and floors: shares start at or above their floors (checked), and the update
divides by F + decay (1 - F) <= 1 with F = sum(f), so a share never falls below its floor.
If the floors sum to 1 the division is by 1 and the shares converge to the floors exactly.
If they sum to F < 1 the shares converge to f_k / F: the floors' proportions, each at least
its floor (the slack 1 - F is spread in proportion to the floors). So floors are lower
bounds that always hold, and the end point is set by their ratios: demos 0.1 and rollouts
0.4 (from 0.5 / 0.5) end at 0.2 / 0.8. A source with floor 0 fades geometrically (near the
end by decay / (F + decay (1 - F)) per iteration); if every floor is 0 the update leaves
the shares unchanged (renormalisation undoes the common factor decay).
A typical use: demos start with a large share that decays to a small floor as the policy's
own rollouts become the better data.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

DEFAULT_CLIP = 2.0
"""Advantages are clipped to [-DEFAULT_CLIP, DEFAULT_CLIP] before exp(A / beta)."""


def _within_source_probabilities(advantages: np.ndarray, beta: float, clip: float) -> np.ndarray:
    # Subtract the maximum before exponentiating: exp(-2 clip / beta) may underflow for a
    # small beta, but the largest weight is then exactly 1, so the sum is never zero.
    scaled = np.clip(advantages, -clip, clip) / beta
    weights = np.exp(scaled - scaled.max())
    probabilities: np.ndarray = weights / weights.sum()
    return probabilities


class AWRSampler:
    """Frames drawn with probability share_k exp(clip(A_i) / beta) / sum_j exp(clip(A_j) / beta).

    `sources` maps a source name to its (n_k,) per-frame advantages; `shares` (>= 0, any
    positive total; normalised here) and `floors` (fractions of a batch, each at most its
    normalised share; missing names are 0) are per source. `sample` returns (source index,
    frame index) arrays; source indices point into `names`.
    """

    def __init__(
        self,
        sources: Mapping[str, np.ndarray],
        beta: float,
        shares: Mapping[str, float],
        floors: Mapping[str, float] | None = None,
        decay: float = 0.9,
        clip: float = DEFAULT_CLIP,
    ) -> None:
        if not sources:
            raise ValueError("AWRSampler needs at least one source of frames, got none")
        if not (np.isfinite(beta) and beta > 0):
            raise ValueError(f"beta must be a finite number > 0, got {beta}")
        if not (np.isfinite(clip) and clip > 0):
            raise ValueError(f"clip must be a finite number > 0, got {clip}")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay}")
        self.names: tuple[str, ...] = tuple(sources)
        self.beta = float(beta)
        self.clip = float(clip)
        self.decay = float(decay)
        self.advantages: dict[str, np.ndarray] = {
            name: self._check_source(name, values) for name, values in sources.items()
        }
        self._shares: dict[str, float] = self._check_shares(shares)
        self.floors: dict[str, float] = self._check_floors(floors or {})
        self._within: dict[str, np.ndarray] = {
            name: _within_source_probabilities(a, self.beta, self.clip)
            for name, a in self.advantages.items()
        }
        self._offsets = np.cumsum([0] + [a.size for a in self.advantages.values()])
        self.iteration = 0
        self._cdf: np.ndarray | None = None

    # -- validation ------------------------------------------------------------------------
    @staticmethod
    def _check_source(name: str, values: np.ndarray) -> np.ndarray:
        array = np.asarray(values, dtype=np.float64)
        if array.ndim != 1:
            raise ValueError(
                f"source {name!r}: advantages must be one-dimensional, got shape {array.shape}"
            )
        if array.size == 0:
            raise ValueError(f"source {name!r} has no frames; drop it or give it frames")
        bad = np.flatnonzero(~np.isfinite(array))
        if bad.size:
            raise ValueError(
                f"source {name!r}: advantage of frame {bad[0]} is {array[bad[0]]}; "
                f"every advantage must be finite ({bad.size} are not)"
            )
        return array

    def _check_shares(self, shares: Mapping[str, float]) -> dict[str, float]:
        if set(shares) != set(self.names):
            raise ValueError(
                f"shares are given for {sorted(shares)} but the sources are {sorted(self.names)}"
            )
        for name, share in shares.items():
            if not (np.isfinite(share) and share >= 0):
                raise ValueError(f"share of source {name!r} must be finite and >= 0, got {share}")
        total = float(sum(shares.values()))
        if total <= 0:
            raise ValueError(f"shares must sum to > 0, got {dict(shares)}")
        return {name: float(shares[name]) / total for name in self.names}

    def _check_floors(self, floors: Mapping[str, float]) -> dict[str, float]:
        unknown = sorted(set(floors) - set(self.names))
        if unknown:
            raise ValueError(f"floors given for unknown sources {unknown}; sources: {self.names}")
        out: dict[str, float] = {}
        for name in self.names:
            floor = float(floors.get(name, 0.0))
            share = self._shares[name]
            # Compared with the normalised share, with a little slack for rounding.
            if not (np.isfinite(floor) and 0.0 <= floor <= share + 1e-12):
                raise ValueError(
                    f"floor of source {name!r} must be in [0, {share:.6g}] (its normalised "
                    f"share), got {floor}"
                )
            out[name] = min(floor, share)
        return out

    @property
    def shares(self) -> dict[str, float]:
        """The current share of each source (a copy; they change only in `step`)."""
        return dict(self._shares)

    # -- probabilities and draws -----------------------------------------------------------
    def probabilities(self) -> dict[str, np.ndarray]:
        """Per source, the (n_k,) probability of drawing each of its frames (all sum to 1)."""
        return {name: self._shares[name] * self._within[name] for name in self.names}

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """`n` frames drawn independently (with replacement): (source index, frame index)
        int64 arrays; `names[source]` is the source's name."""
        if n < 0:
            raise ValueError(f"number of frames to draw must be >= 0, got {n}")
        if self._cdf is None:  # built once per iteration: shares only change in `step`
            probabilities = self.probabilities()
            self._cdf = np.cumsum(np.concatenate([probabilities[k] for k in self.names]))
        cdf = self._cdf
        # side="right" never returns a frame of probability 0 (its cdf equals its
        # predecessor's); min() guards the last frame against cdf[-1] rounding below 1.
        picks = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
        picks = np.minimum(picks, cdf.size - 1)
        source = np.searchsorted(self._offsets, picks, side="right") - 1
        frame = picks - self._offsets[source]
        return source.astype(np.int64), frame.astype(np.int64)

    # -- iterations ------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        """One iteration: each share moves toward its floor by `decay`, then all are
        renormalised (see the module docstring). Returns the new shares."""
        moved = {
            name: self.floors[name] + self.decay * (self._shares[name] - self.floors[name])
            for name in self.names
        }
        total = sum(moved.values())
        if total > 0:  # 0 only when decay = 0 and every floor is 0: keep the shares then
            self._shares = {name: value / total for name, value in moved.items()}
        self._cdf = None
        self.iteration += 1
        return dict(self._shares)

    def with_advantages(self, sources: Mapping[str, np.ndarray]) -> AWRSampler:
        """A sampler over new advantages (recomputed after an iteration) with this one's
        current shares, floors, beta, decay and clip."""
        sampler = AWRSampler(
            sources, self.beta, self.shares, self.floors, decay=self.decay, clip=self.clip
        )
        sampler.iteration = self.iteration
        return sampler
