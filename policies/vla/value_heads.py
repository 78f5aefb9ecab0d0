"""`ValueHeads`: the policy as its own value function (issue 16). Three small heads read
the VLA's fused prefix and predict, for the current frame,

- P(success): will this episode end in success (a logit; BCE against the episode outcome),
- progress: the fraction of a successful episode already done, (t + 1) / T, in [0, 1],
- time to go: seconds until a successful episode ends, timestamp[T-1] - timestamp[t].

Targets come from the episode store's outcomes (`FrameDataset(outcome_targets=True)`), and
the terms are auxiliary (a small weight beside the flow loss), like `StateHead`. After
training, P(success) is Platt-scaled on held-out episodes (`set_success_calibration`; the
learners' `calibrate_values`), because a head trained on a few hundred episodes is far too
sure of itself (its held-out Brier score was worse than a constant's). Nothing at
deployment needs them: export traces the action path only; play, eval and alerts call
`VLAPolicy.predict_values`.

Why progress and time to go are masked on failed episodes: "progress" means "how much of
the way to success", and a failed episode has no success to be part of. Labelling its
frames (t + 1) / T would teach "late in an episode = almost done", so a robot that stalls
until the timeout would be scored as finishing; labelling them 0 would teach the head to
be a second success classifier. So the progress and time heads are conditional estimates
("if this is a successful attempt, how far along is it"), learned from successful
episodes only, and the success head covers every frame. A score that ranks failed and
successful episodes together is their product: P(success) x progress (an expected
progress), which `unilab.algos.value_calibration.episode_progress_ranking` can rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from unilab.policies.vla.prefix import Prefix

TARGET_PREFIX = "target/"
"""Batch fields of the targets: `target/success`, `target/progress`, `target/time_to_go`,
`target/has_progress` (written by `FrameDataset(outcome_targets=True)`)."""
TARGET_NAMES = ("success", "progress", "time_to_go", "has_progress")


@dataclass
class ValueTargets:
    """Per-frame targets (N,) float32 on one device."""

    success: torch.Tensor
    """1.0 when the frame's episode succeeded, else 0.0."""
    progress: torch.Tensor
    """(t + 1) / T in a successful episode of T frames (0 where `has_progress` is 0)."""
    time_to_go: torch.Tensor
    """Seconds from frame t to the last frame of a successful episode (0 where masked)."""
    has_progress: torch.Tensor
    """1.0 where progress and time to go are defined (successful episodes), else 0.0."""

    @classmethod
    def from_batch(
        cls, batch: Mapping[str, torch.Tensor], device: torch.device | None = None
    ) -> ValueTargets:
        """The targets of a dataset batch (fields `target/<name>`); a KeyError names the
        missing ones and how to get them."""
        missing = [TARGET_PREFIX + n for n in TARGET_NAMES if TARGET_PREFIX + n not in batch]
        if missing:
            raise KeyError(
                f"the batch has no value-head target(s) {missing}: build the FrameDataset with "
                f"outcome_targets=True (a store with per-episode success metadata); it has "
                f"{sorted(batch)}"
            )
        vals = [
            batch[TARGET_PREFIX + n].to(device=device, dtype=torch.float32) for n in TARGET_NAMES
        ]
        return cls(*vals)


CALIBRATION_DEFAULTS = {"success_scale": 1.0, "success_bias": 0.0}
"""Platt scaling of the success logit, sigmoid(scale z + bias); identity until fitted."""


class ValueHeads(nn.Module):
    """Success logit, progress and time to go from the mean of the valid prefix tokens."""

    time_scale: torch.Tensor
    success_scale: torch.Tensor
    success_bias: torch.Tensor

    def __init__(self, width: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width)
        )
        self.act = nn.SiLU()
        self.out = nn.Linear(width, 3)  # success logit, progress logit, raw time to go
        # Seconds per unit of the time head: the head predicts time to go / time_scale, so
        # its loss is O(1) whatever the episode length (set from data by `fit_time_scale`).
        self.register_buffer("time_scale", torch.ones(()))
        # Platt scaling of P(success), fitted on held-out episodes after training
        # (`set_success_calibration`): training reads the raw logit, predictions the scaled.
        for name, value in CALIBRATION_DEFAULTS.items():
            self.register_buffer(name, torch.full((), value))

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # Checkpoints written before calibration existed hold no such buffers: identity.
        for name, value in CALIBRATION_DEFAULTS.items():
            state_dict.setdefault(prefix + name, torch.full((), value))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @torch.no_grad()
    def set_success_calibration(self, scale: float, bias: float) -> None:
        """P(success) = sigmoid(scale z + bias) from now on (`value_calibration.fit_platt`)."""
        self.success_scale.fill_(float(scale))
        self.success_bias.fill_(float(bias))

    def forward(self, prefix: Prefix) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(success logit, progress logit, time to go in units of `time_scale`), each (N,)."""
        keep = prefix.valid.to(prefix.tokens.dtype)[..., None]
        pooled = (prefix.tokens * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        out = self.out(self.act(self.trunk(pooled)))
        return out[:, 0], out[:, 1], F.softplus(out[:, 2])

    @torch.no_grad()
    def fit_time_scale(self, time_to_go: torch.Tensor, has_progress: torch.Tensor) -> None:
        """Set `time_scale` to the mean time to go of the frames where it is defined (kept
        as it is when there are none)."""
        mask = has_progress.to(torch.bool)
        if bool(mask.any()):
            mean = time_to_go[mask].to(torch.float32).mean().clamp_min(1e-3)
            self.time_scale.copy_(mean.to(self.time_scale.device))

    def loss(self, prefix: Prefix, targets: ValueTargets) -> dict[str, torch.Tensor]:
        """{"success_loss": BCE on every frame, "progress_loss": squared error and
        "ttg_loss": squared error in units of `time_scale`, both only where
        `has_progress`} (0 when a batch has no such frame, still differentiable)."""
        success_logit, progress_logit, ttg = self(prefix)
        dev, dt = success_logit.device, success_logit.dtype
        success = F.binary_cross_entropy_with_logits(success_logit, targets.success.to(dev, dt))
        mask = targets.has_progress.to(dev, dt)
        denom = mask.sum().clamp_min(1.0)
        progress_err = (torch.sigmoid(progress_logit) - targets.progress.to(dev, dt)).square()
        ttg_err = (ttg - targets.time_to_go.to(dev, dt) / self.time_scale).square()
        return {
            "success_loss": success,
            "progress_loss": (progress_err * mask).sum() / denom,
            "ttg_loss": (ttg_err * mask).sum() / denom,
        }

    def predict(self, prefix: Prefix) -> dict[str, torch.Tensor]:
        """{"success": P(success) (calibrated), "success_logit": the raw logit before
        calibration, "progress": in [0, 1], "time_to_go": seconds}, each (N,)."""
        success_logit, progress_logit, ttg = self(prefix)
        return {
            "success": torch.sigmoid(self.success_scale * success_logit + self.success_bias),
            "success_logit": success_logit,
            "progress": torch.sigmoid(progress_logit),
            "time_to_go": ttg * self.time_scale,
        }


def value_sums(pred: Mapping[str, torch.Tensor], targets: ValueTargets) -> dict[str, torch.Tensor]:
    """Summed held-out errors of the heads' predictions (pooled over batches, then divided
    by `value_metrics`): squared error of P(success) (the Brier score's numerator), the
    successes, and the progress and time-to-go absolute errors where they are defined."""
    mask = targets.has_progress
    return {
        "success_sq_sum": (pred["success"] - targets.success).square().sum(),
        "success_sum": targets.success.sum(),
        "progress_abs_sum": ((pred["progress"] - targets.progress).abs() * mask).sum(),
        "ttg_abs_sum": ((pred["time_to_go"] - targets.time_to_go).abs() * mask).sum(),
        "progress_frames": mask.sum(),
    }


def value_metrics(sums: Mapping[str, float]) -> dict[str, float]:
    """Pooled `value_sums`, with `frames` (the frame count the caller pools beside them)
    -> `val_success_brier`, `val_success_rate`, `val_progress_mae`, `val_ttg_mae` (s)."""
    frames = max(sums["frames"], 1.0)
    defined = max(sums["progress_frames"], 1.0)
    return {
        "val_success_brier": sums["success_sq_sum"] / frames,
        # The constant predictor's Brier score is rate x (1 - rate): the bar to beat.
        "val_success_rate": sums["success_sum"] / frames,
        "val_progress_mae": sums["progress_abs_sum"] / defined,
        "val_ttg_mae": sums["ttg_abs_sum"] / defined,
    }
