"""Platt scaling of a VLA's P(success) head after offline training (issue 16).

A success head trained beside the flow loss on a few hundred episodes learns which episode
a frame comes from: its logits reach +-10 and its held-out Brier score was worse than a
constant predictor's on two seeds of three (docs/vla.md). Its ranking still carries signal,
so at the end of training (`OfflineLoop`, when `algo.calibrate_success` is on) the learner
fits sigmoid(a z + b) on the run's held-out episodes (`value_calibration.fit_platt`) and
stores (a, b) in the heads (`ValueHeads.set_success_calibration`), where play, eval,
alerts, best-of-N and the next round's advantages read it. The held-out Brier score after
the fit is in-sample for two parameters; `unilab bench value_heads` reports the
cross-fitted one (a fit on other episodes) beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from unilab.algos.offline import spread_items
from unilab.algos.value_calibration import brier_score, fit_platt, platt
from unilab.policies.vla.policy import VLAPolicy
from unilab.policies.vla.value_heads import TARGET_PREFIX

Observe = Callable[[Mapping[str, torch.Tensor]], dict[str, torch.Tensor]]


@torch.no_grad()
def success_logits(
    policy: VLAPolicy,
    frames: Any,
    items: np.ndarray,
    observe: Observe,
    batch_size: int,
    device: torch.device,
) -> tuple[np.ndarray, np.ndarray]:
    """(raw success logits, episode outcomes) of `items`, batch by batch."""
    logits, outcomes = [], []
    for start in range(0, items.size, batch_size):
        batch = {
            k: v.to(device) for k, v in frames.batch(items[start : start + batch_size]).items()
        }
        pred = policy.predict_values(observe(batch))
        logits.append(pred["success_logit"].double().cpu().numpy())
        outcomes.append(batch[TARGET_PREFIX + "success"].double().cpu().numpy())
    return np.concatenate(logits), np.concatenate(outcomes)


def calibrate_success(
    policies: list[VLAPolicy],
    frames: Any,
    items: np.ndarray,
    observe: Observe,
    *,
    batch_size: int,
    max_frames: int,
    device: torch.device,
) -> dict[str, float]:
    """Fit Platt scaling on the held-out `items` with the first policy's heads (the EMA
    one, which is exported) and store it in every policy's heads. -> {success_scale,
    success_bias, success_brier_raw, success_brier_calibrated, calibration_frames}.
    ValueError when the frames hold only one outcome (nothing to calibrate against)."""
    picked = spread_items(items, max_frames)
    z, y = success_logits(policies[0], frames, picked, observe, batch_size, device)
    a, b = fit_platt(z, y)
    for policy in policies:
        if policy.value_heads is None:
            raise ValueError("calibrate_success: a policy without value heads")
        policy.value_heads.set_success_calibration(a, b)
    return {
        "success_scale": a,
        "success_bias": b,
        "success_brier_raw": brier_score(platt(z, 1.0, 0.0), y),
        "success_brier_calibrated": brier_score(platt(z, a, b), y),
        "calibration_frames": float(picked.size),
    }
