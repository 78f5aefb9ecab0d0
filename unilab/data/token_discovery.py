"""Exploration-token discovery: K discrete behaviour modes found in a store's demonstrations.

ExToken conditions the VLA on a token that names *how* to do the task (which side of the
wall, push or carry); the experts know their strategy (`mode` column) but the policy never
sees it, and real demonstrations carry no such label, so the tokens are found from the
actions alone:

- **features**: `episode` granularity describes a whole episode by its action trajectory
  resampled to `points` equally spaced instants (a strategy is a property of the episode,
  and resampling makes long and short executions of one strategy comparable); `frame`
  granularity describes each frame by the action chunk of `horizon` frames that starts
  there (last action repeated past the episode's end): finer modes, noisier labels.
  Each action dimension is z-scored over the store first, so no joint dominates by scale.
- **clustering**: k-means with k-means++ seeding and `restarts` runs, the lowest inertia
  kept; everything draws from one `numpy.random.Generator(seed)`, so a seed gives the same
  tokens on every machine. Clusters are renumbered by their first appearance in the store,
  so the numbering does not depend on the seeding order either.
- **labels**: one int32 token per frame (an episode-granularity token is repeated over the
  episode), written into the store's `token` column by `unilab.data.relabel.write_column`.

`adjusted_rand_index` scores the tokens against the experts' ground truth (1: the same
partition, about 0: chance), written here because scikit-learn is not a dependency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

GRANULARITIES = ("episode", "frame")


@dataclass
class TokenDiscoveryConfig:
    tokens: int = 4
    """K, the number of tokens (4-16 in the ExToken recipe; 2 or more)."""
    granularity: str = "episode"
    """`episode` (one token per episode) or `frame` (one per frame, from its action chunk)."""
    points: int = 16
    """Episode granularity: instants the action trajectory is resampled to."""
    horizon: int = 8
    """Frame granularity: frames in each action chunk."""
    restarts: int = 8
    """k-means runs from different seedings; the one with the lowest inertia is kept."""
    iterations: int = 100
    """Lloyd iterations per run at most (stops earlier when no label changes)."""
    seed: int = 0
    """Seed of every random draw: the same seed gives the same tokens."""
    action_field: str = "action"
    """Store field the features are built from."""

    def problems(self) -> list[str]:
        out = []
        if self.tokens < 2:
            out.append(f"tokens={self.tokens} must be at least 2")
        if self.granularity not in GRANULARITIES:
            out.append(f"granularity={self.granularity!r} must be one of {GRANULARITIES}")
        for name in ("points", "horizon", "restarts", "iterations"):
            if getattr(self, name) < 1:
                out.append(f"{name}={getattr(self, name)} must be at least 1")
        return out


@dataclass
class TokenDiscovery:
    """The result: per-frame tokens plus what a report needs."""

    frame_tokens: np.ndarray
    """(num_frames,) int32 token of every frame."""
    inertia: float
    """Sum of squared distances to the assigned centres (feature units)."""
    counts: list[int]
    """Frames per token."""
    episode_tokens: np.ndarray | None = None
    """(num_episodes,) token per episode (episode granularity only)."""
    extras: dict[str, Any] = field(default_factory=dict)


def adjusted_rand_index(labels_a: np.ndarray, labels_b: np.ndarray) -> float:
    """Adjusted Rand index of two partitions of the same items (Hubert & Arabie, 1985).

    1.0 for identical partitions (up to renaming), about 0 for independent ones, negative
    when worse than chance. Two partitions that both put everything in one cluster score 1.
    """
    a, b = np.asarray(labels_a).reshape(-1), np.asarray(labels_b).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"label arrays differ in length: {a.shape[0]} vs {b.shape[0]}")
    n = a.shape[0]
    if n < 2:
        return 1.0
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    table = np.zeros((ia.max() + 1, ib.max() + 1), np.int64)
    np.add.at(table, (ia, ib), 1)

    def pairs(x: np.ndarray) -> float:
        return float((x.astype(np.float64) * (x - 1) / 2.0).sum())

    index = pairs(table)
    rows, cols = pairs(table.sum(1)), pairs(table.sum(0))
    expected = rows * cols / (n * (n - 1) / 2.0)
    top = (rows + cols) / 2.0
    if top == expected:  # both partitions trivial (all one cluster, or all singletons)
        return 1.0
    return (index - expected) / (top - expected)


def _zscore(actions: np.ndarray) -> np.ndarray:
    mean = actions.mean(0)
    std = actions.std(0)
    return (actions - mean) / np.where(std > 1e-8, std, 1.0)


def episode_features(
    actions: np.ndarray, starts: np.ndarray, lengths: np.ndarray, points: int
) -> np.ndarray:
    """(E, points * A): each episode's z-scored actions resampled (linear) to `points`."""
    z = _zscore(actions.reshape(actions.shape[0], -1).astype(np.float64))
    out = np.empty((len(starts), points * z.shape[1]))
    grid = np.linspace(0.0, 1.0, points)
    for e, (s, n) in enumerate(zip(starts, lengths, strict=True)):
        seg = z[s : s + n]
        t = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1)
        cols = [np.interp(grid, t, seg[:, d]) for d in range(z.shape[1])]
        out[e] = np.stack(cols, 1).reshape(-1)
    return out


def frame_features(
    actions: np.ndarray, starts: np.ndarray, lengths: np.ndarray, horizon: int
) -> np.ndarray:
    """(F, horizon * A): the z-scored action chunk starting at each frame, the episode's last
    action repeated past its end (as `FrameDataset` pads chunks)."""
    z = _zscore(actions.reshape(actions.shape[0], -1).astype(np.float64))
    rows = np.empty((z.shape[0], horizon), np.int64)
    for s, n in zip(starts, lengths, strict=True):
        t = np.arange(n)[:, None] + np.arange(horizon)[None, :]
        rows[s : s + n] = s + np.minimum(t, n - 1)
    return z[rows].reshape(z.shape[0], -1)


def _kmeans_pp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    centres = [x[rng.integers(x.shape[0])]]
    d2 = ((x - centres[0]) ** 2).sum(1)
    for _ in range(1, k):
        total = d2.sum()
        pick = rng.integers(x.shape[0]) if total <= 0 else rng.choice(x.shape[0], p=d2 / total)
        centres.append(x[pick])
        d2 = np.minimum(d2, ((x - x[pick]) ** 2).sum(1))
    return np.stack(centres)


def _assign(x: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d2 = (x**2).sum(1)[:, None] - 2.0 * x @ centres.T + (centres**2).sum(1)[None, :]
    labels = d2.argmin(1)
    return labels, np.maximum(d2[np.arange(x.shape[0]), labels], 0.0)


def kmeans(
    x: np.ndarray, k: int, rng: np.random.Generator, restarts: int = 8, iterations: int = 100
) -> tuple[np.ndarray, np.ndarray, float]:
    """Lloyd's k-means, best of `restarts` k-means++ seedings -> (labels, centres, inertia).
    An emptied cluster is re-seeded at the point farthest from its centre."""
    if x.shape[0] < k:
        raise ValueError(f"{x.shape[0]} samples cannot form {k} clusters; lower the token count")
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    for _ in range(restarts):
        centres = _kmeans_pp(x, k, rng)
        labels, d2 = _assign(x, centres)
        for _ in range(iterations):
            for j in range(k):
                members = labels == j
                if members.any():
                    centres[j] = x[members].mean(0)
                else:
                    far = int(d2.argmax())
                    centres[j], d2[far] = x[far], 0.0
            new, d2 = _assign(x, centres)
            if np.array_equal(new, labels):
                break
            labels = new
        inertia = float(d2.sum())
        if best is None or inertia < best[2]:
            best = (labels.copy(), centres.copy(), inertia)
    assert best is not None
    return best


def _by_first_appearance(labels: np.ndarray, k: int) -> np.ndarray:
    """Rename clusters 0, 1, ... in order of first appearance (unused ids last)."""
    _, first = np.unique(labels, return_index=True)
    order = np.unique(labels)[np.argsort(first)]
    rename = np.empty(k, np.int64)
    rename[order] = np.arange(len(order))
    rest = np.setdiff1d(np.arange(k), order)
    rename[rest] = np.arange(len(order), k)
    return rename[labels]


def discover_tokens(
    actions: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    cfg: TokenDiscoveryConfig,
) -> TokenDiscovery:
    """Tokens for frames whose episodes start at `starts` with `lengths` (see module doc)."""
    problems = cfg.problems()
    if problems:
        raise ValueError("token discovery: " + "; ".join(problems))
    if actions.shape[0] != int(np.sum(lengths)):
        raise ValueError(
            f"{actions.shape[0]} action rows but the episodes hold {int(np.sum(lengths))} frames"
        )
    if not np.isfinite(actions).all():
        raise ValueError("the actions hold NaN or inf; repair the store before clustering")
    rng = np.random.default_rng(cfg.seed)
    if cfg.granularity == "episode":
        feats = episode_features(actions, starts, lengths, cfg.points)
        labels, _, inertia = kmeans(feats, cfg.tokens, rng, cfg.restarts, cfg.iterations)
        episode_tokens = _by_first_appearance(labels, cfg.tokens).astype(np.int32)
        frame_tokens = np.repeat(episode_tokens, lengths)
    else:
        feats = frame_features(actions, starts, lengths, cfg.horizon)
        labels, _, inertia = kmeans(feats, cfg.tokens, rng, cfg.restarts, cfg.iterations)
        frame_tokens = _by_first_appearance(labels, cfg.tokens).astype(np.int32)
        episode_tokens = None
    counts = np.bincount(frame_tokens, minlength=cfg.tokens).tolist()
    return TokenDiscovery(frame_tokens, inertia, counts, episode_tokens)


def match_report(tokens: np.ndarray, modes: np.ndarray, mode_names: list[str]) -> dict[str, Any]:
    """How the tokens match the ground-truth strategies: ARI, per-token purity, and the
    token x mode frame table."""
    k = int(tokens.max()) + 1 if tokens.size else 0
    m = max(len(mode_names), int(modes.max()) + 1 if modes.size else 0)
    table = np.zeros((k, m), np.int64)
    np.add.at(table, (tokens.astype(np.int64), modes.astype(np.int64)), 1)
    purity = [float(row.max() / row.sum()) if row.sum() else 0.0 for row in table]
    names = [*mode_names, *[f"mode {i}" for i in range(len(mode_names), m)]]
    return {
        "ari": adjusted_rand_index(tokens, modes),
        "purity": purity,
        "table": {
            f"token {t}": dict(zip(names, map(int, table[t]), strict=True)) for t in range(k)
        },
    }


def discover_store_tokens(
    store_path: str,
    cfg: TokenDiscoveryConfig,
    write: bool = True,
    mode_field: str = "mode",
    on_stage: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Discover tokens for a store's frames, write them into its `token` column (unless
    `write` is False) and report the match with `mode_field` when the store has it."""
    from unilab.data.relabel import write_column
    from unilab.data.store import EpisodeStore

    with EpisodeStore.open(store_path, "a" if write else "r") as st:
        if cfg.action_field not in st.schema.fields:
            raise ValueError(
                f"{store_path} has no field {cfg.action_field!r}; it has "
                f"{sorted(st.schema.user_fields)}"
            )
        if not len(st):
            raise ValueError(f"{store_path} holds no episodes; nothing to cluster")
        if on_stage:
            on_stage("reading")
        actions = st.read(cfg.action_field)
        starts, lengths = np.asarray(st.starts), np.asarray(st.lengths)
        if on_stage:
            on_stage("clustering")
        result = discover_tokens(actions, starts, lengths, cfg)
        doc: dict[str, Any] = {
            "store": str(store_path),
            "tokens": cfg.tokens,
            "granularity": cfg.granularity,
            "seed": cfg.seed,
            "episodes": len(st),
            "frames": int(lengths.sum()),
            "counts": result.counts,
            "inertia": result.inertia,
            "written": write,
        }
        if mode_field in st.schema.fields:
            modes = st.read(mode_field)
            names = _mode_names(st)
            doc["ground_truth"] = mode_field
            doc.update(match_report(result.frame_tokens, modes, names))
        if write:
            if on_stage:
                on_stage("writing")
            write_column(st, "token", result.frame_tokens)
    return doc


def _mode_names(st: Any) -> list[str]:
    """Strategy names from the episodes' metadata (`mode`, `mode_name`), if recorded."""
    names: dict[int, str] = {}
    for meta in st.all_meta():
        extra = meta.tags
        if "mode" in extra and "mode_name" in extra:
            names[int(extra["mode"])] = str(extra["mode_name"])
    return [names.get(i, f"mode {i}") for i in range(max(names) + 1)] if names else []
