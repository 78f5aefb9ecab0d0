"""Failure alerts in play and eval from the policy's own value heads.

`AlertMonitor` is an `on_step` hook of `unilab.runtime.rollout.rollout`: at each step it
asks the VLA's value heads (`VLAPolicy.predict_values`) for P(success) and progress of the
envs that re-planned at that step (a chunk boundary: the observation the chunk was planned
from), holds each env's last prediction between re-plans, and feeds every env's current
prediction to a `FailureAlerter` once per control step (its clock is the control period).
So the value heads cost one batched forward per re-plan, not per step, and nothing is
logged inside the loop: alerts are collected (and handed to `on_alert`, which play uses to
print them as they come).

Only each env's first episode is scored (`one_per_env`, the eval protocol): alerts of later
episodes are kept but not scored. `quality()` scores the first-episode alerts against the
outcomes with `alert_quality`: precision, recall and mean / median lead time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from unilab.deploy.failure_alerts import ALERT_KINDS, Alert, AlertQuality, FailureAlerter
from unilab.deploy.failure_alerts import alert_quality as score_alerts
from unilab.runtime.rollout import SUCCESS_METRIC, StepInfo


class NoValueHeadsError(ValueError):
    """Alerts were asked of a policy without value heads."""


@dataclass(frozen=True)
class AlertOptions:
    """`FailureAlerter`'s rules: P(success) below `success_threshold`, or no progress rise
    above `stall_epsilon` for `stall_seconds`."""

    success_threshold: float = 0.2
    stall_seconds: float = 5.0
    stall_epsilon: float = 0.02

    def check(self) -> None:
        if not 0.0 <= self.success_threshold <= 1.0:
            raise ValueError(f"success threshold {self.success_threshold} must be in [0, 1]")
        if not (math.isfinite(self.stall_seconds) and self.stall_seconds > 0):
            raise ValueError(f"stall seconds {self.stall_seconds} must be a number > 0")


def value_policy(policy: Any) -> Any:
    """The torch VLA with value heads behind a loaded policy (a `NumpyPolicy` or a wrapper
    with `.policy`); a `NoValueHeadsError` saying why otherwise."""
    from unilab.policies.vla.policy import VLAPolicy

    inner, seen = policy, policy
    for _ in range(4):  # wrappers: TunedPolicy -> NumpyPolicy -> VLAPolicy
        if isinstance(inner, VLAPolicy) or inner is None:
            break
        seen, inner = inner, getattr(inner, "policy", None)
    if not isinstance(inner, VLAPolicy):
        onnx = hasattr(seen, "session")
        raise NoValueHeadsError(
            "failure alerts need a VLA with value heads (a run trained with "
            f"algo.model.value_heads=true / algo.value_weight > 0); {type(seen).__name__} "
            "has none"
            + (
                " (an exported ONNX graph holds only the action path: evaluate the run directory)"
                if onnx
                else ""
            )
        )
    if inner.value_heads is None:
        raise NoValueHeadsError(
            "failure alerts need the VLA's value heads; this run was trained without them "
            "(algo.model.value_heads=false): train with algo.value_weight > 0"
        )
    return inner


class AlertMonitor:
    """`on_step` hook: value predictions at re-plans -> `FailureAlerter` every step."""

    def __init__(
        self,
        policy: Any,
        num_envs: int,
        dt: float,
        options: AlertOptions,
        on_alert: Callable[[Alert], None] | None = None,
    ) -> None:
        options.check()
        self.vla = value_policy(policy)
        self.dt = float(dt)
        self.alerter = FailureAlerter(
            num_envs,
            success_threshold=options.success_threshold,
            stall_seconds=options.stall_seconds,
            stall_epsilon=options.stall_epsilon,
            dt=dt,
        )
        self.on_alert = on_alert
        self.success = np.full(num_envs, np.nan)
        self.progress = np.full(num_envs, np.nan)
        self.alerts: list[Alert] = []
        self.outcomes: dict[tuple[int, int], bool] = {}
        self.end_times: dict[tuple[int, int], float] = {}
        self.predictions = 0
        """Envs' value predictions made (one per env per re-plan)."""

    def predict(self, obs: dict[str, np.ndarray], envs: np.ndarray) -> None:
        import torch

        sub = {
            k: torch.from_numpy(np.ascontiguousarray(np.asarray(v)[envs]))
            for k, v in obs.items()
            if k in self.vla.obs_groups
        }
        with torch.inference_mode():
            values = self.vla.predict_values(sub)
        self.success[envs] = values["success"].float().cpu().numpy()
        self.progress[envs] = values["progress"].float().cpu().numpy()
        self.predictions += int(envs.size)

    def __call__(self, info: StepInfo) -> None:
        planned = np.flatnonzero(info.planned)
        if planned.size:
            self.predict(info.obs, planned)
        raised = self.alerter.step(self.success, self.progress)
        if raised:
            self.alerts.extend(raised)
            if self.on_alert is not None:
                for alert in raised:
                    self.on_alert(alert)
        out = info.result
        ended = np.asarray(out.terminated | out.truncated, dtype=bool)
        if ended.any():
            success = out.extras.get(SUCCESS_METRIC)
            for env in np.flatnonzero(ended):
                key = (int(env), int(self.alerter.episode[env]))
                if key[1] == 0 and key not in self.outcomes:
                    ok = success is not None and bool(success[env] > 0.5)
                    self.outcomes[key] = ok
                    self.end_times[key] = int(self.alerter.step_count[env]) * self.dt
            self.alerter.reset(ended)
            self.success[ended] = np.nan
            self.progress[ended] = np.nan

    def scored_alerts(self) -> list[Alert]:
        """Alerts of the episodes that have an outcome (each env's first, when it ended)."""
        return [a for a in self.alerts if (a.env, a.episode) in self.outcomes]

    def quality(self) -> AlertQuality:
        return score_alerts(self.scored_alerts(), self.outcomes, self.end_times)


def merge_quality(monitors: list[AlertMonitor]) -> AlertQuality:
    """`alert_quality` over the scored episodes of several monitors (one per eval seed):
    env ids are offset so each monitor's episodes stay apart."""
    alerts: list[Alert] = []
    outcomes: dict[tuple[int, int], bool] = {}
    ends: dict[tuple[int, int], float] = {}
    offset = 0
    for monitor in monitors:
        alerts += [replace(a, env=a.env + offset) for a in monitor.scored_alerts()]
        outcomes.update({(e + offset, i): v for (e, i), v in monitor.outcomes.items()})
        ends.update({(e + offset, i): v for (e, i), v in monitor.end_times.items()})
        offset += monitor.alerter.num_envs
    return score_alerts(alerts, outcomes, ends)


def _finite_or_none(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def alerts_report(monitors: list[AlertMonitor], options: AlertOptions) -> dict[str, Any]:
    """The eval report's `alerts` entry (NaN ratios as null: JSON has no NaN)."""
    q = merge_quality(monitors)
    scored = [a for m in monitors for a in m.scored_alerts()]
    return {
        "success_threshold": float(options.success_threshold),
        "stall_seconds": float(options.stall_seconds),
        "stall_epsilon": float(options.stall_epsilon),
        "precision": _finite_or_none(q.precision),
        "recall": _finite_or_none(q.recall),
        "mean_lead_s": _finite_or_none(q.mean_lead_s),
        "median_lead_s": _finite_or_none(q.median_lead_s),
        "alerted_episodes": q.alerted_episodes,
        "failed_episodes": q.failed_episodes,
        "true_alerts": q.true_alerts,
        "by_kind": {k: sum(a.kind == k for a in scored) for k in ALERT_KINDS},
        "predictions": sum(m.predictions for m in monitors),
    }


def format_alert(alert: Alert) -> str:
    what = "P(success)" if alert.kind == "low_success" else "progress"
    return (
        f"alert env {alert.env} episode {alert.episode} at {alert.time_s:.2f} s: "
        f"{alert.kind} ({what} {alert.value:.3f})"
    )
