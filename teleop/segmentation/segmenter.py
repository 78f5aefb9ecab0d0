"""Per-frame labels from progress rates: smoothing, thresholds, minimum run lengths, and
the recovery rule; `label_store` writes them into a store's `segment` column.

For frame t of an episode of n frames the rate is the progress model's delta over the
forward window (t, t + w) (the last w frames use the episode's last window), divided by the window's length and
multiplied by the model's pace, so 1 means "as fast as the autonomous successes" and 0
"no change". After a moving average:

    rate >  progress_threshold -> progress
    rate <  failure_threshold  -> failure
    otherwise                  -> idle

Runs shorter than their label's minimum length are merged into a neighbour (the longer
one), shortest first, until every run is long enough (or the episode is one run). Then
recovery: every frame an operator controlled (`is_intervention`, or origin `human`) is
recovery, and so are the first `recovery_window` frames of a progress run that directly
follows a failure run (a policy getting itself out of trouble).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from unilab.data.relabel import write_column
from unilab.data.schema import SEGMENTS
from unilab.data.store import EpisodeStore
from unilab.teleop.segmentation.config import SegmentConfig
from unilab.teleop.segmentation.progress_model import (
    ProgressModel,
    episode_features,
    human_frames,
)

NONE, PROGRESS, IDLE, FAILURE, RECOVERY = range(len(SEGMENTS))


def progress_rates(model: ProgressModel, feats: np.ndarray, window: int) -> np.ndarray:
    """(n,) rate per frame of one episode's (n, dim) features (see the module doc)."""
    n = feats.shape[0]
    t = np.arange(n)
    # Forward window: frame t's action shows in the frames after it (the setpoint moves at
    # once, the arm follows), so a span's first frame already reads as what it is.
    lo, hi = np.minimum(t, max(n - 1 - window, 0)), np.minimum(t + window, n - 1)
    x = torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32))
    with torch.no_grad():
        delta = model(x[lo], x[hi]).numpy()
    span = np.maximum(hi - lo, 1)
    return np.asarray(delta * float(model.pace) / span, dtype=np.float64)


def smooth(x: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average (edges use the frames there are)."""
    if width <= 1 or x.size == 0:
        return x.copy()
    kernel = np.ones(width)
    num = np.convolve(x, kernel, mode="same")
    den = np.convolve(np.ones_like(x), kernel, mode="same")
    out: np.ndarray = num / den
    return out


def runs(labels: np.ndarray) -> list[list[int]]:
    """[[label, start, stop), ...] of constant labels."""
    if labels.size == 0:
        return []
    cut = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    starts = np.concatenate([[0], cut])
    stops = np.concatenate([cut, [labels.size]])
    return [[int(labels[a]), int(a), int(b)] for a, b in zip(starts, stops, strict=True)]


def enforce_min_lengths(labels: np.ndarray, minimum: dict[int, int]) -> np.ndarray:
    """Merge runs shorter than `minimum[label]` into their longer neighbour, shortest run
    first, until none is too short (or one run is left)."""
    r = runs(labels)
    while len(r) > 1:
        short = [k for k, (lab, a, b) in enumerate(r) if b - a < minimum.get(lab, 1)]
        if not short:
            break
        k = min(short, key=lambda q: r[q][2] - r[q][1])
        left = r[k - 1] if k > 0 else None
        right = r[k + 1] if k + 1 < len(r) else None
        if right is None or (left is not None and left[2] - left[1] >= right[2] - right[1]):
            assert left is not None
            left[2] = r[k][2]
        else:
            right[1] = r[k][1]
        del r[k]
        merged: list[list[int]] = []  # neighbours of one label become one run
        for run in r:
            if merged and merged[-1][0] == run[0]:
                merged[-1][2] = run[2]
            else:
                merged.append(run)
        r = merged
    out = labels.copy()
    for lab, a, b in r:
        out[a:b] = lab
    return out


def segment_episode(
    rates: np.ndarray, human: np.ndarray, cfg: SegmentConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Labels (uint8 SEGMENTS codes) of one episode from its raw rates and operator flags;
    also the smoothed rates."""
    cfg.check()
    r = smooth(np.asarray(rates, dtype=np.float64), cfg.smooth)
    labels = np.full(r.size, IDLE, dtype=np.uint8)
    labels[r > cfg.progress_threshold] = PROGRESS
    labels[r < cfg.failure_threshold] = FAILURE
    minimum = {PROGRESS: cfg.min_progress, IDLE: cfg.min_idle, FAILURE: cfg.min_failure}
    labels = enforce_min_lengths(labels, minimum)
    if cfg.recovery_window > 0:
        spans = runs(labels)
        for k in range(1, len(spans)):
            lab, a, b = spans[k]
            if lab == PROGRESS and spans[k - 1][0] == FAILURE:
                labels[a : min(b, a + cfg.recovery_window)] = RECOVERY
    labels[np.asarray(human, dtype=bool)] = RECOVERY
    return labels, r


@dataclass
class LabelResult:
    store: str
    episodes: int = 0
    frames: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    """Frames per label."""

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "episodes": self.episodes,
            "frames": self.frames,
            "counts": dict(self.counts),
        }


def predict_labels(
    store: EpisodeStore, model: ProgressModel, cfg: SegmentConfig, on_episode: Any = None
) -> np.ndarray:
    """(num_frames,) uint8 labels of every committed frame of an open store."""
    feats = episode_features(store, model.fields)
    if feats.shape[1] != model.dim:
        raise ValueError(
            f"{store.path}: fields {model.fields} give {feats.shape[1]} features per frame; "
            f"the progress model was trained on {model.dim}"
        )
    human = human_frames(store)
    out = np.zeros(store.num_frames, dtype=np.uint8)
    for e, (a, n) in enumerate(zip(store.starts.tolist(), store.lengths.tolist(), strict=True)):
        rates = progress_rates(model, feats[a : a + n], cfg.window)
        out[a : a + n], _ = segment_episode(rates, human[a : a + n], cfg)
        if on_episode is not None:
            on_episode(e)
    return out


def label_store(
    path: str | os.PathLike[str],
    model: ProgressModel,
    cfg: SegmentConfig | None = None,
    *,
    on_episode: Any = None,
) -> LabelResult:
    """Label every committed frame of the store at `path` and write the labels into its
    `segment` column in place (`unilab.data.relabel.write_column`: the column is replaced
    atomically; no other array changes)."""
    cfg = cfg or SegmentConfig()
    cfg.check()
    with EpisodeStore.open(path, "a") as st:
        labels = predict_labels(st, model, cfg, on_episode)
        write_column(st, "segment", labels)
        counts = np.bincount(labels, minlength=len(SEGMENTS))
        return LabelResult(
            str(path),
            len(st),
            st.num_frames,
            {name: int(c) for name, c in zip(SEGMENTS, counts, strict=True)},
        )
