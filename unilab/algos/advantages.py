"""Per-frame advantages for offline policy improvement, with the policy as its own critic.

Issue 16 (the LeHome 2026 recipe) improves a VLA from its own rollouts without a separate
critic network: the policy's value heads predict success probability and task progress,
and those predictions are the values. Advantages come from two sources:

- early on, when the value heads are untrained, the episode's return minus the mean return
  of its task's episodes (`episode_baseline_advantages`): crude but unbiased per task;
- later, GAE over the policy's own per-frame predictions (`gae_from_predictions`).

`blend` mixes the two (the weight moves toward GAE as the heads improve), `clip_advantages`
bounds them (default [-2, 2]) so a few extreme frames cannot dominate exp(A / beta) in AWR,
and `apply_demo_advantage` pins demonstrations and human takeovers to a fixed positive
value: they are what we want more of, and the value heads never saw them fail.

RECAP conditions the policy on a binary advantage indicator (the VLA's `advantage`
condition: 1 positive, 0 negative, -1 null). `recap_indicator` draws it per frame, masked to
null with a probability that falls from 0.5 for frames with advantage <= 0 to 0.1 for
clearly good frames (`recap_null_probability`): bad frames keep training the unconditional
branch that guidance subtracts, good frames mostly teach the "positive" condition. When the
indicator is drawn here, set the VLA's `advantage_dropout` to 0 so frames are not nulled
twice.

Origin codes: this module sits below `unilab.data` in the layers, so the caller passes the
store's origin names (`unilab.data.schema.ORIGINS`) as `origin_names`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_CLIP = 2.0
"""Advantages are clipped to [-DEFAULT_CLIP, DEFAULT_CLIP] unless told otherwise."""

DEMO_ADVANTAGE = 1.0
"""The fixed advantage of demonstration and human-intervention frames."""

DEMO_ORIGINS: tuple[str, ...] = ("human",)
"""Origins whose frames count as demonstrations (teleoperated episodes, imported demos)."""

RECAP_NULL_MAX = 0.5
"""Masking probability of frames with advantage <= 0."""

RECAP_NULL_MIN = 0.1
"""Masking probability of frames with advantage >= `RECAP_FULL_ADVANTAGE`."""

RECAP_FULL_ADVANTAGE = 1.0
"""Advantage at (and above) which the masking probability reaches `RECAP_NULL_MIN`."""

NULL, NEGATIVE, POSITIVE = -1, 0, 1
"""Values of the RECAP indicator, as the VLA's `advantage` condition reads them."""


def _finite_1d(name: str, values: np.ndarray | Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] is {array[bad[0]]}; every value must be finite")
    return array


def episode_baseline_advantages(
    returns_per_episode: np.ndarray | Sequence[float],
    task_ids: np.ndarray | Sequence[int] | Sequence[str],
) -> np.ndarray:
    """(E,) float64: each episode's return minus the mean return of its task's episodes.

    The per-task baseline keeps an easy task's successes from looking better than a hard
    task's: every task's advantages average to zero. A task with one episode gets 0.
    """
    returns = _finite_1d("returns_per_episode", returns_per_episode)
    tasks = np.asarray(task_ids)
    if tasks.shape != returns.shape:
        raise ValueError(
            f"{returns.size} episode returns but task_ids has shape {tasks.shape}; "
            "give one task id per episode"
        )
    if returns.size == 0:
        return returns.copy()
    _, task_index = np.unique(tasks, return_inverse=True)
    task_index = task_index.reshape(-1)
    counts = np.bincount(task_index)
    means = np.bincount(task_index, weights=returns) / counts
    advantages: np.ndarray = returns - means[task_index]
    return advantages


def expand_to_frames(
    per_episode: np.ndarray | Sequence[float], episode_lengths: np.ndarray | Sequence[int]
) -> np.ndarray:
    """(sum(lengths),) float64: each episode's value repeated over its frames, in order."""
    values = _finite_1d("per_episode", per_episode)
    lengths = np.asarray(episode_lengths, dtype=np.int64)
    if lengths.shape != values.shape:
        raise ValueError(f"{values.size} episode values but {lengths.size} episode lengths")
    if lengths.size and int(lengths.min()) < 0:
        raise ValueError(f"episode lengths must be >= 0, got {int(lengths.min())}")
    return np.repeat(values, lengths)


def gae_from_predictions(
    values: np.ndarray | Sequence[float],
    rewards: np.ndarray | Sequence[float],
    terminal: bool,
    gamma: float = 0.99,
    lam: float = 0.95,
    bootstrap_value: float | None = None,
) -> np.ndarray:
    """(T,) float64 GAE advantages of one episode from the policy's own value predictions.

    `values[t]` is the policy's prediction at frame t (success probability or progress);
    `rewards[t]` is the reward of the step from frame t to t + 1 (typically the progress
    increment, or 1 on the step that succeeds). With V_T the value after the last frame,

        delta_t = r_t + gamma V_{t+1} - V_t,   A_t = delta_t + gamma lam A_{t+1},  A_T = 0.

    V_T is 0 when the episode terminated (nothing follows a termination), and when it was
    truncated (time limit) V_T is `bootstrap_value`, or the last prediction values[T-1]
    when that is not given (the state after the cut is close to the last state seen).
    """
    v = _finite_1d("values", values)
    r = _finite_1d("rewards", rewards)
    if v.shape != r.shape:
        raise ValueError(f"{v.size} values but {r.size} rewards; give one of each per frame")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    if v.size == 0:
        return v.copy()
    if terminal:
        last = 0.0
    elif bootstrap_value is not None:
        last = float(bootstrap_value)
    else:
        last = float(v[-1])
    next_values = np.append(v[1:], last)
    deltas = r + gamma * next_values - v
    advantages = np.empty_like(deltas)
    running = 0.0
    # A backward recursion over T frames: one episode is at most a few thousand frames.
    for t in range(v.size - 1, -1, -1):
        running = float(deltas[t]) + gamma * lam * running
        advantages[t] = running
    return advantages


def blend(
    early: np.ndarray | Sequence[float], gae: np.ndarray | Sequence[float], weight: float
) -> np.ndarray:
    """(1 - weight) early + weight gae, elementwise; `weight` in [0, 1] moves from the
    episode-baseline advantages (0) to GAE over the value predictions (1) as the value
    heads become trustworthy."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"blend weight must be in [0, 1], got {weight}")
    a = np.asarray(early, dtype=np.float64)
    b = np.asarray(gae, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"early advantages have shape {a.shape} but GAE has {b.shape}")
    mixed: np.ndarray = (1.0 - weight) * a + weight * b
    return mixed


def clip_advantages(
    advantages: np.ndarray | Sequence[float], bound: float = DEFAULT_CLIP
) -> np.ndarray:
    """Advantages clipped to [-bound, bound] (float64)."""
    if not bound > 0:
        raise ValueError(f"clip bound must be > 0, got {bound}")
    clipped: np.ndarray = np.clip(np.asarray(advantages, dtype=np.float64), -bound, bound)
    return clipped


def demo_frames(
    origin: np.ndarray | Sequence[int],
    is_intervention: np.ndarray | Sequence[bool],
    *,
    origin_names: Sequence[str],
    demo_origins: Sequence[str] = DEMO_ORIGINS,
) -> np.ndarray:
    """(N,) bool: frames recorded from a demonstration origin or during a human takeover.

    `origin` holds the store's uint8 codes, indices into `origin_names` (pass
    `unilab.data.schema.ORIGINS`); `demo_origins` names the origins that are demonstrations.
    """
    names = tuple(origin_names)
    unknown = [o for o in demo_origins if o not in names]
    if unknown:
        raise ValueError(f"demo origins {unknown} are not among the origins {list(names)}")
    codes = np.asarray(origin, dtype=np.int64).reshape(-1)
    flags = np.asarray(is_intervention, dtype=bool).reshape(-1)
    if codes.shape != flags.shape:
        raise ValueError(f"{codes.size} origin codes but {flags.size} is_intervention flags")
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= len(names)):
        bad = int(codes.min()) if int(codes.min()) < 0 else int(codes.max())
        raise ValueError(f"origin code {bad} is outside [0, {len(names)}) ({list(names)})")
    demo_codes = np.array([names.index(o) for o in demo_origins], dtype=np.int64)
    mask: np.ndarray = np.isin(codes, demo_codes) | flags
    return mask


def apply_demo_advantage(
    advantages: np.ndarray | Sequence[float],
    origin: np.ndarray | Sequence[int],
    is_intervention: np.ndarray | Sequence[bool],
    *,
    origin_names: Sequence[str],
    demo_origins: Sequence[str] = DEMO_ORIGINS,
    value: float = DEMO_ADVANTAGE,
) -> np.ndarray:
    """A copy of `advantages` with demonstration and intervention frames set to `value`."""
    out = np.array(advantages, dtype=np.float64).reshape(-1)
    mask = demo_frames(
        origin, is_intervention, origin_names=origin_names, demo_origins=demo_origins
    )
    if mask.shape != out.shape:
        raise ValueError(f"{out.size} advantages but {mask.size} origin codes")
    out[mask] = value
    return out


def _check_recap(null_max: float, null_min: float, full_advantage: float) -> None:
    if not 0.0 <= null_min <= null_max <= 1.0:
        raise ValueError(
            f"RECAP masking probabilities need 0 <= null_min <= null_max <= 1, "
            f"got null_min={null_min}, null_max={null_max}"
        )
    if not full_advantage > 0:
        raise ValueError(f"RECAP full_advantage must be > 0, got {full_advantage}")


def recap_null_probability(
    advantage: np.ndarray | Sequence[float] | float,
    *,
    null_max: float = RECAP_NULL_MAX,
    null_min: float = RECAP_NULL_MIN,
    full_advantage: float = RECAP_FULL_ADVANTAGE,
) -> np.ndarray:
    """Probability of masking each frame's indicator to null: `null_max` for advantage <= 0,
    `null_min` for advantage >= `full_advantage`, linear in between (same shape as input)."""
    _check_recap(null_max, null_min, full_advantage)
    a = np.asarray(advantage, dtype=np.float64)
    if np.isnan(a).any():
        raise ValueError("advantage holds NaN; the masking probability is undefined there")
    frac = np.clip(a / full_advantage, 0.0, 1.0)
    probability: np.ndarray = null_max - (null_max - null_min) * frac
    return probability


def recap_indicator(
    advantage: np.ndarray | Sequence[float],
    rng: np.random.Generator,
    *,
    null_max: float = RECAP_NULL_MAX,
    null_min: float = RECAP_NULL_MIN,
    full_advantage: float = RECAP_FULL_ADVANTAGE,
) -> np.ndarray:
    """int64 indicator per frame: 1 (advantage > 0), 0 (advantage <= 0), or -1 (null) with
    probability `recap_null_probability(advantage)`."""
    p_null = recap_null_probability(
        advantage, null_max=null_max, null_min=null_min, full_advantage=full_advantage
    )
    a = np.asarray(advantage, dtype=np.float64)
    indicator = np.where(a > 0, POSITIVE, NEGATIVE).astype(np.int64)
    masked = rng.random(a.shape) < p_null
    indicator[masked] = NULL
    return indicator
