"""`WeightedOriginSampler`: draw dataset items with a chosen mix of origins."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Literal

import numpy as np
from torch.utils.data import Sampler

from unilab.data.dataset import FrameDataset
from unilab.data.errors import SchemaMismatchError
from unilab.data.schema import ORIGINS


class WeightedOriginSampler(Sampler[int]):
    """Samples item indices (with replacement) by origin.

    mode "share" (default): `weights` are the fractions of samples drawn from each origin,
    whatever its frame count (e.g. {"sim": 1, "human": 1} -> half the batch from demos).
    mode "per_frame": each frame of origin o has weight `weights[o]` relative to the others.
    Within an origin, items are drawn uniformly. Origins not named get weight 0; a named
    origin with no frames is left out and the rest renormalized (see `probabilities`).
    """

    def __init__(
        self,
        source: FrameDataset | np.ndarray,
        weights: Mapping[str, float],
        num_samples: int,
        *,
        mode: Literal["share", "per_frame"] = "share",
        seed: int | None = None,
    ) -> None:
        origins = source.origins if isinstance(source, FrameDataset) else np.asarray(source)
        unknown = sorted(set(weights) - set(ORIGINS))
        if unknown:
            raise SchemaMismatchError(f"unknown origin(s) {unknown}; origins are {list(ORIGINS)}")
        if any(w < 0 or not np.isfinite(w) for w in weights.values()):
            raise ValueError(f"origin weights must be finite and >= 0, got {dict(weights)}")
        if mode not in ("share", "per_frame"):
            raise ValueError(f"mode must be 'share' or 'per_frame', got {mode!r}")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        self.num_samples = num_samples
        self.members: list[np.ndarray] = []
        group_weight = []
        names = []
        for code, name in enumerate(ORIGINS):
            idx = np.flatnonzero(origins == code)
            w = float(weights.get(name, 0.0))
            if idx.size == 0 or w == 0.0:
                continue
            self.members.append(idx)
            group_weight.append(w * idx.size if mode == "per_frame" else w)
            names.append(name)
        if not self.members:
            present = [ORIGINS[c] for c in np.unique(origins)]
            raise ValueError(
                f"no item has an origin with positive weight: weights {dict(weights)}, "
                f"origins present {present}"
            )
        p = np.array(group_weight) / sum(group_weight)
        self.probabilities: dict[str, float] = dict(zip(names, p.tolist(), strict=True))
        self._p = p
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        groups = self._rng.choice(len(self.members), size=self.num_samples, p=self._p)
        out = np.empty(self.num_samples, dtype=np.int64)
        for g, members in enumerate(self.members):
            sel = groups == g
            out[sel] = members[self._rng.integers(0, members.size, size=int(sel.sum()))]
        return iter(out.tolist())


class WeightedFrameSampler(Sampler[int]):
    """Samples item indices (with replacement) in proportion to `FrameDataset.item_weights`
    (a curated store's `weight` column; uniform for other stores). Items of weight 0 are
    never drawn."""

    def __init__(
        self, source: FrameDataset | np.ndarray, num_samples: int, *, seed: int | None = None
    ) -> None:
        w = source.item_weights if isinstance(source, FrameDataset) else np.asarray(source)
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 1 or not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("item weights must be a 1-d array of finite values >= 0")
        if w.sum() <= 0:
            raise ValueError("every item has weight 0: nothing to sample")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        self.num_samples = num_samples
        self._p = w / w.sum()
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.num_samples

    def draw(self, size: int) -> np.ndarray:
        """`size` item indices at once (for `FrameDataset.batch`)."""
        return self._rng.choice(self._p.size, size=size, p=self._p)

    def __iter__(self) -> Iterator[int]:
        return iter(self.draw(self.num_samples).tolist())
