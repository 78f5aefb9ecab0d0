"""Per-frame advantages of a store snapshot for `awr_flow` (decisions 0122, 0123).

`FrameTable.from_frames` reads what the advantages are computed from out of a
`FrameDataset` (per-frame origin, intervention flag, policy version, reward, termination;
per-episode task and success). `frame_sources` gives each frame its sampling source (one
of `SOURCES`: its origin, or `expert` for `sim` frames no learned policy produced).
`compute_advantages` is the advantage of every frame: the episode return
(`episode_returns`) minus the mean of its scene's episodes where the scene was played more
than once (`baseline_groups`), else of its task's, blended with GAE over the
policy's own predictions (`gae_advantages`) at the weight `gae_weight_at` gives the
iteration, clipped, demonstration and intervention frames pinned (not those of a takeover
that failed the task anyway). The formulas are
`unilab.algos.advantages`'; the learner is `unilab.algos.awr_flow`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from unilab.algos import advantages as adv

if TYPE_CHECKING:
    from unilab.algos.awr_flow import AWRFlowConfig

ORIGIN_NAMES: tuple[str, ...] = ("sim", "real", "human", "wm")
"""The store's origin codes (`unilab.data.schema.ORIGINS`; this layer may not import it, a
test keeps the two equal)."""

EXPERT = "expert"
"""Source of `sim` frames that no learned policy produced (policy_version < 0)."""
HUMAN = "human"
"""Source of human-origin frames and of every intervention frame."""

SOURCES: tuple[str, ...] = (EXPERT, *ORIGIN_NAMES)
"""Every source a frame can belong to, in the sampler's order."""


@dataclass
class FrameTable:
    """Per-frame columns (store order) and per-episode metadata of a store snapshot."""

    episode_start: np.ndarray
    """(E,) first frame of each episode."""
    episode_length: np.ndarray
    """(E,) frames per episode."""
    tasks: list[str]
    """(E,) episode metadata `task`."""
    outcomes: list[bool | None]
    """(E,) episode metadata `success` (None: unknown)."""
    failed_rescue: np.ndarray
    """(E,) bool: a takeover drove the episode and still failed the task."""
    scenes: list[str | None]
    """(E,) episode `scene` tag: equal values started from the same scene (None: unknown)."""
    origin: np.ndarray
    """(N,) uint8 origin codes (indices into `ORIGIN_NAMES`)."""
    is_intervention: np.ndarray
    policy_version: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray

    @property
    def num_frames(self) -> int:
        return int(self.origin.shape[0])

    @property
    def episode_of(self) -> np.ndarray:
        return np.repeat(np.arange(self.episode_length.size), self.episode_length)

    @classmethod
    def from_frames(cls, frames: Any) -> FrameTable:
        """From a `FrameDataset` (what the offline loop hands the learner)."""
        needed = (
            "frame_column",
            "episode_tasks",
            "episode_outcomes",
            "episode_failed_rescue",
            "episode_scenes",
            "episode_of",
        )
        if not all(hasattr(frames, n) for n in needed):
            raise TypeError(
                "awr_flow needs its frames as a FrameDataset (frame_column, episode_tasks, "
                f"episode_outcomes, episode_failed_rescue, episode_scenes, episode_of); got "
                f"{type(frames).__name__}"
            )
        tasks = [str(t) for t in frames.episode_tasks]
        episode_of = np.asarray(frames.episode_of)
        lengths = np.bincount(episode_of, minlength=len(tasks)).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        col = frames.frame_column
        return cls(
            episode_start=starts,
            episode_length=lengths,
            tasks=tasks,
            outcomes=list(frames.episode_outcomes),
            failed_rescue=np.asarray(frames.episode_failed_rescue, dtype=bool),
            scenes=list(frames.episode_scenes),
            origin=np.asarray(col("origin")).astype(np.int64),
            is_intervention=np.asarray(col("is_intervention")).astype(bool),
            policy_version=np.asarray(col("policy_version")).astype(np.int64),
            reward=np.asarray(col("reward")).astype(np.float64),
            terminated=np.asarray(col("terminated")).astype(bool),
        )


def frame_sources(
    origin: np.ndarray,
    policy_version: np.ndarray,
    origin_names: Sequence[str] = ORIGIN_NAMES,
    is_intervention: np.ndarray | None = None,
) -> np.ndarray:
    """(N,) int64 index into `SOURCES` of each frame: its origin, or `expert` for `sim` frames
    that no learned policy produced (policy_version < 0). Intervention frames
    (`is_intervention`) are `human` whatever their origin: a takeover's frames are the
    person's (in simulation, the scripted expert standing in for one), not the policy's, and
    they need their own share: counted as `sim`, a round's takeovers crowd out the policy's
    rollouts, and with them the demonstrations (stop 38)."""
    names = tuple(origin_names)
    codes = np.asarray(origin, dtype=np.int64)
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= len(names)):
        raise ValueError(f"origin codes must be in [0, {len(names)}) ({list(names)})")
    lookup = np.array([SOURCES.index(n) for n in names], dtype=np.int64)
    out: np.ndarray = lookup[codes]
    expert = (codes == names.index("sim")) & (np.asarray(policy_version) < 0)
    out[expert] = SOURCES.index(EXPERT)
    if is_intervention is not None:
        out[np.asarray(is_intervention, dtype=bool)] = SOURCES.index(HUMAN)
    return out


def episode_returns(table: FrameTable, kind: str) -> np.ndarray:
    """(E,) per-episode return: success as 1 / 0 (`success`), or the summed reward."""
    if kind == "reward":
        sums: np.ndarray = np.bincount(
            table.episode_of, weights=table.reward, minlength=table.episode_length.size
        )
        return sums
    unknown = [i for i, s in enumerate(table.outcomes) if s is None]
    if unknown:
        raise ValueError(
            f"episode_return=success needs every episode's success metadata; {len(unknown)} "
            f"of {len(table.outcomes)} episodes have none (e.g. {unknown[:5]}). Record "
            "outcomes (`unilab play record=` does) or set algo.episode_return=reward"
        )
    return np.array([1.0 if s else 0.0 for s in table.outcomes])


def baseline_groups(tasks: Sequence[str], scenes: Sequence[str | None]) -> list[str]:
    """(E,) the group whose mean return is each episode's baseline: its scene, where at
    least two episodes of the task started from it (`unilab improve --repeats`), else its
    task. Against its scene's mean, an episode is judged by what the policy did there, not
    by how easy the scene was: a policy's successes are mostly its easy scenes (stop 42),
    and a per-task baseline credits them for that."""
    if len(tasks) != len(scenes):
        raise ValueError(f"{len(tasks)} episode tasks but {len(scenes)} episode scenes")
    keys = [None if s is None else f"scene:{t}/{s}" for t, s in zip(tasks, scenes, strict=True)]
    counts = Counter(k for k in keys if k is not None)
    return [
        key if key is not None and counts[key] > 1 else f"task:{task}"
        for task, key in zip(tasks, keys, strict=True)
    ]


def gae_advantages(table: FrameTable, values: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """(N,) GAE over each episode with `values` (N,) as V: reward 1 on the last frame of a
    successful episode (0 elsewhere), V after the end 0 when it terminated or succeeded, else
    the last prediction (a time limit cut it)."""
    out = np.zeros(table.num_frames)
    for e, (start, length) in enumerate(
        zip(table.episode_start.tolist(), table.episode_length.tolist(), strict=True)
    ):
        if length == 0:
            continue
        stop = start + length
        success = table.outcomes[e] is True
        rewards = np.zeros(length)
        rewards[-1] = 1.0 if success else 0.0
        terminal = bool(table.terminated[stop - 1]) or success
        out[start:stop] = adv.gae_from_predictions(
            values[start:stop], rewards, terminal, gamma=gamma, lam=lam
        )
    return out


def compute_advantages(
    table: FrameTable,
    cfg: AWRFlowConfig,
    values: np.ndarray | None = None,
    gae_weight: float = 0.0,
) -> np.ndarray:
    """(N,) per-frame advantages (see the module doc): per-scene or per-task baseline,
    blended with GAE over `values` at `gae_weight`, clipped, demonstrations and
    interventions pinned (save a failed takeover's)."""
    returns = episode_returns(table, cfg.episode_return)
    groups = baseline_groups(table.tasks, table.scenes)
    early = adv.expand_to_frames(
        adv.episode_baseline_advantages(returns, groups), table.episode_length
    )
    mixed = early
    if values is not None and gae_weight > 0:
        mixed = adv.blend(early, gae_advantages(table, values, cfg.gamma, cfg.lam), gae_weight)
    clipped = adv.clip_advantages(mixed, cfg.clip)
    # by origin (a station's recording is `human`); takeovers are judged apart below
    sources = frame_sources(table.origin, table.policy_version)
    # A takeover that still failed is no demonstration (40 % of the scripted expert's
    # intervention frames on arm_around_obstacle, its longest segments): those frames keep
    # their episode's advantage. Interventions with no known outcome (a station's) count.
    trusted = table.is_intervention & ~table.failed_rescue[table.episode_of]
    demo = np.isin(sources, [SOURCES.index(s) for s in cfg.demo_sources]) | trusted
    clipped[demo] = cfg.demo_advantage
    return clipped


def gae_weight_at(cfg: AWRFlowConfig) -> float:
    """The blend weight of GAE at `cfg.iteration` (before checking the heads exist)."""
    return float(min(cfg.gae_weight_max, cfg.gae_weight_step * cfg.iteration))


__all__ = [
    "EXPERT",
    "ORIGIN_NAMES",
    "SOURCES",
    "FrameTable",
    "compute_advantages",
    "episode_returns",
    "frame_sources",
    "gae_advantages",
    "gae_weight_at",
]
