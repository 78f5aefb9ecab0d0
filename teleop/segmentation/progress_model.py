"""The progress model: a small MLP that reads a pair of frames (i, j) of one episode and
predicts the task progress made from i to j, in fractions of a whole successful episode.

    delta(i, j) = m([x_i, x_j, x_j - x_i]) - m([x_j, x_i, x_i - x_j])

so delta(j, i) = -delta(i, j) and a frame paired with itself (an arm holding still) is
exactly zero, whatever the training data says (VLAC-style pairwise progress, with the
antisymmetry built in rather than learnt).

Targets come from the store's own episodes (no labels needed):
- autonomous successes (success, no intervention frame): (j - i) / T for pairs up to
  `max_gap` apart, in both orders (time-normalised progress of a run that worked);
- the last `failed_tail` frames of failed episodes: 0 (nothing there led to success);
- the `pre_intervention` frames before an operator took over: -(j - i) / T_ref (an
  operator takes over because things were going wrong).

Checkpoints hold only tensors and plain values (`torch.save`), read with
`weights_only=True`.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from unilab.data.store import EpisodeStore
from unilab.teleop.segmentation.config import ProgressModelConfig

FORMAT = "unilab-progress-model-1"
PRE_INTERVENTION = 10
"""Frames before an intervention taken as regress (see the module doc)."""


class ProgressModel(nn.Module):
    """Pairwise progress delta over normalised frame features."""

    mean: torch.Tensor
    std: torch.Tensor
    pace: torch.Tensor

    def __init__(self, dim: int, hidden: int, layers: int, fields: list[str]) -> None:
        super().__init__()
        self.dim, self.hidden_size, self.num_layers = dim, hidden, layers
        self.fields = list(fields)
        blocks: list[nn.Module] = []
        width = 3 * dim
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.SiLU()]
            width = hidden
        blocks.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*blocks)
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.register_buffer("pace", torch.tensor(100.0))
        """Mean frames of the autonomous successes: a rate of 1 is their pace."""

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def forward(self, xi: torch.Tensor, xj: torch.Tensor) -> torch.Tensor:
        a, b = self.normalise(xi), self.normalise(xj)
        fwd = self.net(torch.cat([a, b, b - a], dim=-1))
        bwd = self.net(torch.cat([b, a, a - b], dim=-1))
        return (fwd - bwd).squeeze(-1)


def episode_features(store: EpisodeStore, fields: list[str]) -> np.ndarray:
    """(num_frames, dim) float32: the named vector fields of every frame, concatenated."""
    bad = [f for f in fields if f not in store.schema.fields or store.schema.fields[f].is_image]
    if bad:
        vector = [n for n in store.schema.observation_fields if not n.startswith("images/")]
        raise ValueError(
            f"progress model fields {bad} are not vector fields of {store.path}; valid: {vector}"
        )
    cols = [store.read(f).reshape(store.num_frames, -1).astype(np.float32) for f in fields]
    return np.concatenate(cols, axis=1)


class _Pairs:
    """Training pairs as frame rows, with targets and loss weights."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, i: np.ndarray, j: np.ndarray, target: np.ndarray, weight: float) -> None:
        if i.size:
            self.parts.append((i, j, target, np.full(i.size, weight)))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        i, j, t, w = (np.concatenate([p[k] for p in self.parts]) for k in range(4))
        return i.astype(np.int64), j.astype(np.int64), t.astype(np.float32), w.astype(np.float32)


def human_frames(store: EpisodeStore) -> np.ndarray:
    """(num_frames,) bool: an operator was in control (intervention flag or human origin)."""
    from unilab.data.schema import ORIGINS

    flags: np.ndarray = store.read("is_intervention") | (
        store.read("origin") == ORIGINS.index("human")
    )
    return flags


def autonomous_successes(store: EpisodeStore, episodes: np.ndarray) -> list[int]:
    """Episodes among `episodes` that succeeded without an operator."""
    metas = store.all_meta()
    human = human_frames(store)
    starts, lengths = store.starts, store.lengths
    return [
        int(e)
        for e in episodes
        if metas[e].success and not human[starts[e] : starts[e] + lengths[e]].any()
    ]


def training_pairs(
    store: EpisodeStore, cfg: ProgressModelConfig, episodes: np.ndarray
) -> tuple[_Pairs, float]:
    """The pairs the module doc describes, from `episodes`; and the pace (frames)."""
    metas = store.all_meta()
    starts, lengths = store.starts, store.lengths
    human = human_frames(store)
    auto = set(autonomous_successes(store, episodes))
    if not auto:
        raise ValueError(
            f"{store.path}: no autonomous successful episode (success and no intervention) "
            "among the training episodes; the progress model needs some to learn the pace"
        )
    pace = float(np.mean(lengths[sorted(auto)]))
    gaps = np.arange(-cfg.max_gap, cfg.max_gap + 1)
    pairs = _Pairs()
    for e in episodes:
        a, n = int(starts[e]), int(lengths[e])
        i = np.repeat(np.arange(n), gaps.size)
        j = i + np.tile(gaps, n)
        ok = (j >= 0) & (j < n) & (j != i)
        i, j = i[ok], j[ok]
        if int(e) in auto:
            pairs.add(a + i, a + j, (j - i) / n, 1.0)
            continue
        if not metas[e].success and cfg.failed_tail > 0:
            tail = (i >= n - cfg.failed_tail) & (j >= n - cfg.failed_tail)
            pairs.add(a + i[tail], a + j[tail], np.zeros(int(tail.sum())), cfg.negative_weight)
        h = human[a : a + n]
        for s in (np.flatnonzero(h[1:] & ~h[:-1]) + 1).tolist():
            lo = s - PRE_INTERVENTION
            m = (i >= lo) & (i < s) & (j >= lo) & (j < s)
            pairs.add(a + i[m], a + j[m], -(j[m] - i[m]) / pace, cfg.negative_weight)
    return pairs, pace


def train_progress_model(
    store: EpisodeStore | str | os.PathLike[str],
    cfg: ProgressModelConfig | None = None,
    *,
    on_step: Any = None,
) -> tuple[ProgressModel, dict[str, Any]]:
    """Train a progress model on a store's episodes; the model and a report (losses by
    step, train/validation episodes, pairs). `on_step(step, loss)` is called every step."""
    cfg = cfg or ProgressModelConfig()
    own = not isinstance(store, EpisodeStore)
    st = EpisodeStore.open(store, "r") if not isinstance(store, EpisodeStore) else store
    try:
        if len(st) < 2:
            raise ValueError(f"{st.path} holds {len(st)} episode(s); training needs at least 2")
        rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        order = rng.permutation(len(st))
        n_val = round(cfg.val_fraction * len(st)) if cfg.val_fraction > 0 else 0
        n_val = min(n_val, len(st) - 1)
        val_eps, train_eps = np.sort(order[:n_val]), np.sort(order[n_val:])
        feats = episode_features(st, cfg.fields)
        pairs, pace = training_pairs(st, cfg, train_eps)
        i, j, target, weight = pairs.arrays()
        x = torch.from_numpy(feats)
        model = ProgressModel(feats.shape[1], cfg.hidden, cfg.layers, cfg.fields)
        used = np.unique(np.concatenate([i, j]))
        model.mean.copy_(x[used].mean(0))
        model.std.copy_(x[used].std(0).clamp_min(1e-3))
        model.pace.fill_(pace)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        # Targets are fractions of an episode; scaling by the pace makes them O(gap), so
        # the loss does not vanish for short gaps.
        scale = float(pace)
        ti, tj = torch.from_numpy(i), torch.from_numpy(j)
        tt, tw = torch.from_numpy(target) * scale, torch.from_numpy(weight)
        losses: list[float] = []
        for step in range(cfg.steps):
            k = torch.from_numpy(rng.integers(0, i.size, cfg.batch_size))
            pred = model(x[ti[k]], x[tj[k]]) * scale
            loss = (tw[k] * (pred - tt[k]) ** 2).sum() / tw[k].sum().clamp_min(1e-6)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(step, losses[-1])
        report: dict[str, Any] = {
            "losses": losses,
            "pairs": int(i.size),
            "train_episodes": train_eps.tolist(),
            "val_episodes": val_eps.tolist(),
            "pace": pace,
        }
        if val_eps.size:
            vpairs, _ = (
                training_pairs(st, cfg, val_eps)
                if autonomous_successes(st, val_eps)
                else (None, 0.0)
            )
            if vpairs is not None:
                vi, vj, vt, vw = vpairs.arrays()
                with torch.no_grad():
                    vp = model(x[vi], x[vj]).numpy() * scale
                report["val_loss"] = float((vw * (vp - vt * scale) ** 2).sum() / vw.sum())
        model.eval()
        return model, report
    finally:
        if own:
            st.close()


def save_progress_model(model: ProgressModel, path: str | os.PathLike[str]) -> Path:
    """Write the model (tensors and plain values only) with torch.save."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FORMAT,
        "dim": model.dim,
        "hidden": model.hidden_size,
        "layers": model.num_layers,
        "fields": list(model.fields),
        "state_dict": model.state_dict(),
    }
    tmp = out.with_name(out.name + ".tmp")
    torch.save(doc, tmp)
    os.replace(tmp, out)
    return out


def load_progress_model(path: str | os.PathLike[str]) -> ProgressModel:
    """Read a checkpoint written by `save_progress_model` (weights_only=True)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"progress model checkpoint {p} does not exist")
    try:
        doc = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a file that is not its own
        raise ValueError(f"{p} is not a progress model checkpoint ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{p} is not a progress model checkpoint (format {FORMAT!r})")
    model = ProgressModel(int(doc["dim"]), int(doc["hidden"]), int(doc["layers"]), doc["fields"])
    model.load_state_dict(doc["state_dict"])
    model.eval()
    return model


def config_json(cfg: ProgressModelConfig) -> dict[str, Any]:
    return asdict(cfg)
