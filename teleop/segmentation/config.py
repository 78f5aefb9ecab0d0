"""Configs of the segmentation critic: the progress model, the segmenter's thresholds and
minimum lengths, and what `curate` keeps. Plain dataclasses with `checked` ranges, so
`config_problems` reports bad values the same way `compose` does for training configs."""

from __future__ import annotations

from dataclasses import dataclass, field

from unilab.config.checks import checked, config_problems
from unilab.config.errors import ConfigError


@dataclass
class ProgressModelConfig:
    """A small MLP over a pair of frames (i, j) -> predicted progress delta."""

    fields: list[str] = field(default_factory=lambda: ["obs/policy"])
    """Vector observation fields concatenated into the frame features."""
    hidden: int = checked(256, ge=8)
    layers: int = checked(2, ge=1, le=8)
    steps: int = checked(1500, ge=1)
    """Gradient steps of training."""
    batch_size: int = checked(512, ge=8)
    lr: float = checked(1e-3, gt=0.0, le=1.0)
    max_gap: int = checked(30, ge=1)
    """Largest |j - i| of a training pair (the segmenter looks at short windows)."""
    negative_weight: float = checked(1.0, ge=0.0)
    """Loss weight of pairs from failed episodes' last frames (target: no progress)."""
    failed_tail: int = checked(20, ge=0)
    """Frames at the end of a failed episode taken as 'no progress' pairs (0: none)."""
    val_fraction: float = checked(0.2, ge=0.0, lt=1.0)
    """Episodes held out to report the validation loss."""
    seed: int = checked(0, ge=0)


@dataclass
class SegmentConfig:
    """How per-frame progress rates become labels."""

    model: ProgressModelConfig = field(default_factory=ProgressModelConfig)
    window: int = checked(3, ge=1)
    """The rate at frame t is the model's delta over (t, t + window)."""
    smooth: int = checked(3, ge=1)
    """Moving-average width (frames) over the rates."""
    progress_threshold: float = checked(0.35)
    """Rate (in units of the demos' average pace: 1 = expert speed) above which a frame is
    progress."""
    failure_threshold: float = checked(-0.35)
    """Rate below which a frame is failure-inducing; between the two it is idle."""
    min_progress: int = checked(3, ge=1)
    min_idle: int = checked(5, ge=1)
    min_failure: int = checked(3, ge=1)
    """Shortest run (frames) of each label; shorter runs are merged into a neighbour."""
    recovery_window: int = checked(20, ge=0)
    """Frames of autonomous progress right after a failure that count as recovery (0:
    none). Intervention / human frames are always recovery."""

    def check(self) -> None:
        problems = config_problems(self)
        if self.failure_threshold >= self.progress_threshold:
            problems.append(
                f"failure_threshold={self.failure_threshold} must be below "
                f"progress_threshold={self.progress_threshold}"
            )
        if problems:
            raise ConfigError("; ".join(problems))


@dataclass
class CurateConfig:
    """Per-label frame weights of the curated store (0 drops the frames)."""

    progress_weight: float = checked(1.0, ge=0.0)
    recovery_weight: float = checked(1.0, ge=0.0)
    idle_weight: float = checked(0.0, ge=0.0)
    failure_weight: float = checked(0.0, ge=0.0)
    keep_failures: bool = False
    """Keep failure frames (weight `failure_weight`, label `failure`) as negatives for
    learners that use them, instead of dropping them."""
    unlabelled_weight: float = checked(1.0, ge=0.0)
    """Weight of frames whose segment is still `none`."""
    min_run: int = checked(2, ge=1)
    """Kept runs shorter than this are dropped (too short to learn from)."""

    def check(self) -> None:
        problems = config_problems(self)
        if problems:
            raise ConfigError("; ".join(problems))
