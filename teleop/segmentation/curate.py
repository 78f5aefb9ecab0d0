"""`curate`: the next round's training store from a labelled one.

Each frame gets a weight from its `segment` label (`CurateConfig`): progress and recovery
are kept, idle is dropped or down-weighted, failure is dropped or kept as negatives
(weight `failure_weight`, label `failure`, for learners that use negatives). Frames of
weight 0 are dropped, and an episode is cut where frames are dropped: each kept run of
consecutive frames becomes its own episode, so no action chunk or n-step window of a
learner spans a gap. A run that is not the end of its source episode ends `truncated`
(its successor is not in the store). The curated store has the source's schema plus a
float32 `weight` column (the source's, multiplied, when it has one), which
`FrameDataset.item_weights` and `WeightedFrameSampler` read. Each episode's metadata
records its source episode and first frame (`tags.curated_from`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from unilab.data.episode import EpisodeMeta
from unilab.data.schema import SEGMENTS, FieldSpec, StoreSchema
from unilab.data.store import EpisodeStore
from unilab.teleop.segmentation.config import CurateConfig

WEIGHT_FIELD = "weight"


@dataclass
class CurateResult:
    source: str
    out: str
    source_episodes: int = 0
    source_frames: int = 0
    episodes: int = 0
    frames: int = 0
    kept_by_label: dict[str, int] = field(default_factory=dict)
    dropped_by_label: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def frame_weights(segment: np.ndarray, cfg: CurateConfig) -> np.ndarray:
    """(n,) float32 weight of each frame from its segment code."""
    table = np.zeros(len(SEGMENTS), dtype=np.float32)
    table[SEGMENTS.index("none")] = cfg.unlabelled_weight
    table[SEGMENTS.index("progress")] = cfg.progress_weight
    table[SEGMENTS.index("recovery")] = cfg.recovery_weight
    table[SEGMENTS.index("idle")] = cfg.idle_weight
    table[SEGMENTS.index("failure")] = cfg.failure_weight
    out: np.ndarray = table[segment]
    return out


def kept_mask(segment: np.ndarray, weights: np.ndarray, cfg: CurateConfig) -> np.ndarray:
    keep: np.ndarray = weights > 0
    if cfg.keep_failures:
        keep |= segment == SEGMENTS.index("failure")
    return keep


def curated_schema(schema: StoreSchema) -> StoreSchema:
    user = {n: schema.fields[n] for n in schema.user_fields}
    user.setdefault(WEIGHT_FIELD, FieldSpec((), "float32"))
    return StoreSchema(user)


def curate(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    cfg: CurateConfig | None = None,
    *,
    overwrite: bool = False,
    on_episode: Any = None,
) -> CurateResult:
    """Write the curated copy of `source` to the new store `out` (see the module doc)."""
    cfg = cfg or CurateConfig()
    cfg.check()
    if Path(out).resolve() == Path(source).resolve():
        raise ValueError(f"--out {out} is the source store; curate writes a new store")
    with EpisodeStore.open(source, "r") as src:
        segment = src.read("segment")
        if src.num_frames and not (segment != SEGMENTS.index("none")).any():
            raise ValueError(
                f"{source}: every frame's segment is 'none'; label it first with "
                "`unilab data segment`"
            )
        weights = frame_weights(segment, cfg)
        if WEIGHT_FIELD in src.schema.fields:
            weights = weights * src.read(WEIGHT_FIELD).astype(np.float32)
        keep = kept_mask(segment, weights, cfg)
        starts, lengths = src.starts.tolist(), src.lengths.tolist()
        pieces = [
            _kept_runs(keep[a : a + n], cfg.min_run) for a, n in zip(starts, lengths, strict=True)
        ]
        keep = np.zeros_like(keep)  # what is really written: runs shorter than min_run go too
        for a, runs in zip(starts, pieces, strict=True):
            for lo, hi in runs:
                keep[a + lo : a + hi] = True
        schema = curated_schema(src.schema)
        result = CurateResult(str(source), str(out), len(src), src.num_frames)
        for code, name in enumerate(SEGMENTS):
            here = segment == code
            result.kept_by_label[name] = int((here & keep).sum())
            result.dropped_by_label[name] = int((here & ~keep).sum())
        with EpisodeStore.create(out, schema, overwrite=overwrite) as dst:
            metas = src.all_meta()
            pending: list[tuple[dict[str, Any], EpisodeMeta]] = []
            for e, (a, n) in enumerate(zip(starts, lengths, strict=True)):
                frames = src.episode(e) if pieces[e] else {}
                for lo, hi in pieces[e]:
                    pending.append(_run_episode(frames, weights[a : a + n], lo, hi, n, metas[e], e))
                if sum(len(p[0]["reward"]) for p in pending) >= 8192:
                    dst.append_episodes(pending)
                    pending = []
                if on_episode is not None:
                    on_episode(e)
            dst.append_episodes(pending)
            result.episodes, result.frames = len(dst), dst.num_frames
    return result


def _kept_runs(keep: np.ndarray, min_run: int) -> list[tuple[int, int]]:
    """[lo, hi) runs of kept frames at least `min_run` long."""
    if not keep.any():
        return []
    edges = np.diff(np.concatenate([[0], keep.astype(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(a), int(b)) for a, b in zip(starts, stops, strict=True) if b - a >= min_run]


def _run_episode(
    frames: dict[str, np.ndarray],
    weights: np.ndarray,
    lo: int,
    hi: int,
    n: int,
    meta: EpisodeMeta,
    source: int,
) -> tuple[dict[str, Any], EpisodeMeta]:
    out: dict[str, Any] = {k: v[lo:hi] for k, v in frames.items()}
    out["origin"] = frames["origin"][lo:hi]
    out["segment"] = frames["segment"][lo:hi]
    out[WEIGHT_FIELD] = weights[lo:hi]
    if hi < n:  # cut before the source episode's end: its next frame is not here
        out["terminated"] = np.zeros(hi - lo, dtype=bool)
        out["truncated"] = np.zeros(hi - lo, dtype=bool)
        out["truncated"][-1] = True
    tags = dict(meta.tags)
    tags["curated_from"] = {"episode": source, "frame": lo}
    # Success describes the source episode; a cut-out piece did not reach its end.
    success = meta.success if hi == n else None
    new = EpisodeMeta(
        meta.task, meta.language_instruction, success, meta.seed, meta.robot, meta.fps, tags
    )
    return out, new
