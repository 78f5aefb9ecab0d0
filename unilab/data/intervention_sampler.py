"""DAgger: route human interventions into the next training round.

`InterventionSampler` draws dataset items by their frame's `is_intervention` label:

- mode "upweight" (default): an intervention frame is `weight` times as likely as any
  other frame (HG-DAgger / HIL-SERL style: keep the policy's own data, emphasise the
  corrections);
- mode "select": only intervention frames (plus, with `lead_frames` > 0, the frames just
  before each takeover, where the policy was going wrong).

Works with any `FrameDataset` over a store whose frames carry the core `is_intervention`
column (every store has it; HIL recordings set it per frame).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np
from torch.utils.data import Sampler

from unilab.data.dataset import FrameDataset
from unilab.data.store import EpisodeStore


def intervention_mask(store: EpisodeStore, lead_frames: int = 0) -> np.ndarray:
    """(num_frames,) bool: intervention frames, widened by `lead_frames` before each
    takeover inside the same episode."""
    labels = store.read("is_intervention").astype(bool)
    if lead_frames <= 0 or not labels.any():
        return labels
    out = labels.copy()
    episode = store.episode_ids()
    starts = np.flatnonzero(labels & ~np.concatenate([[False], labels[:-1]]))
    for s in starts:
        lo = max(0, s - lead_frames)
        same = episode[lo:s] == episode[s]
        out[lo:s] |= same
    return out


class InterventionSampler(Sampler[int]):
    def __init__(
        self,
        dataset: FrameDataset,
        num_samples: int,
        *,
        mode: Literal["upweight", "select"] = "upweight",
        weight: float = 5.0,
        lead_frames: int = 0,
        seed: int | None = None,
    ) -> None:
        if mode not in ("upweight", "select"):
            raise ValueError(f"mode must be 'upweight' or 'select', got {mode!r}")
        if not (np.isfinite(weight) and weight > 0):
            raise ValueError(f"weight must be a positive number, got {weight}")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        with EpisodeStore.open(dataset.path, "r") as store:
            mask = intervention_mask(store, lead_frames)
        self.is_intervention = mask[dataset.indices]
        """Per dataset item: does it start at an intervention frame."""
        n_int = int(self.is_intervention.sum())
        if mode == "select":
            if n_int == 0:
                raise ValueError(
                    f"{dataset.path} has no intervention frames to select; record a HIL session "
                    "with takeovers first, or use mode='upweight'"
                )
            p = self.is_intervention / n_int
        else:
            w = np.where(self.is_intervention, float(weight), 1.0)
            p = w / w.sum()
        self.probabilities = p
        self.intervention_share = float(p[self.is_intervention].sum())
        """Expected fraction of draws that are intervention frames."""
        self.num_samples = num_samples
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        draws = self._rng.choice(
            len(self.probabilities), size=self.num_samples, p=self.probabilities
        )
        return iter(draws.tolist())
