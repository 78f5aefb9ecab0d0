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

The monitor also keeps what it fed the alerter during the first episodes (one (N,) pair of
arrays per control step, until every env's first episode has ended), so `replay(options)`
scores other thresholds on the same episodes without running them again: `AlertOptions`'
`sweep_thresholds` / `sweep_stall_s` put a precision-recall sweep of each rule alone into
the report. Replaying the live options gives the live alerts exactly (tested).
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

    success_threshold: float = 0.5
    """0.5 on Platt-scaled heads: on arm_move_side (3 seeds) it kept precision at 0.97-1.00
    and caught 48-72 % of failures 6-7 s ahead; 0.2 caught 11-35 % (decision 0124)."""
    stall_seconds: float = 5.0
    stall_epsilon: float = 0.02
    sweep_thresholds: tuple[float, ...] = ()
    """Report the `low_success` rule alone at each of these thresholds (replayed)."""
    sweep_stall_s: tuple[float, ...] = ()
    """Report the `progress_stall` rule alone at each of these durations (replayed)."""

    def check(self) -> None:
        for threshold in (self.success_threshold, *self.sweep_thresholds):
            if not 0.0 <= threshold <= 1.0:
                raise ValueError(f"success threshold {threshold} must be in [0, 1]")
        for seconds in (self.stall_seconds, *self.sweep_stall_s):
            if not (math.isfinite(seconds) and seconds > 0):
                raise ValueError(f"stall seconds {seconds} must be a number > 0")


SWEEP_DEFAULT_THRESHOLDS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
"""`--alert-sweep`'s P(success) thresholds."""
SWEEP_DEFAULT_STALL_S = (1.0, 2.0, 3.0, 5.0, 8.0)
"""`--alert-sweep`'s stall durations (s)."""
_NEVER_S = 1e12
"""A stall duration no episode reaches: the stall rule switched off in a sweep."""


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
        self.trace: list[tuple[np.ndarray, np.ndarray]] = []
        """(success, progress) fed to the alerter at each step of the first episodes."""
        self.first_end_step = np.full(num_envs, -1, dtype=np.int64)
        """Trace step at which each env's first episode ended (-1: still running)."""

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
        if (self.first_end_step < 0).any():  # a first episode still runs: keep its inputs
            self.trace.append((self.success.copy(), self.progress.copy()))
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
            first = ended & (self.first_end_step < 0)
            self.first_end_step[first] = len(self.trace) - 1
            self.alerter.reset(ended)
            self.success[ended] = np.nan
            self.progress[ended] = np.nan

    def scored_alerts(self) -> list[Alert]:
        """Alerts of the episodes that have an outcome (each env's first, when it ended)."""
        return [a for a in self.alerts if (a.env, a.episode) in self.outcomes]

    def quality(self) -> AlertQuality:
        return score_alerts(self.scored_alerts(), self.outcomes, self.end_times)

    def replay(self, options: AlertOptions) -> list[Alert]:
        """The first-episode alerts `options` would have raised on the recorded inputs
        (scored episodes only, as `scored_alerts`)."""
        options.check()
        alerter = FailureAlerter(
            self.alerter.num_envs,
            success_threshold=options.success_threshold,
            stall_seconds=options.stall_seconds,
            stall_epsilon=options.stall_epsilon,
            dt=self.dt,
        )
        alerts: list[Alert] = []
        for t, (success, progress) in enumerate(self.trace):
            alerts += [a for a in alerter.step(success, progress) if a.episode == 0]
            alerter.reset(self.first_end_step == t)
        return [a for a in alerts if (a.env, a.episode) in self.outcomes]


def merge_quality(
    monitors: list[AlertMonitor], options: AlertOptions | None = None
) -> AlertQuality:
    """`alert_quality` over the scored episodes of several monitors (one per eval seed):
    env ids are offset so each monitor's episodes stay apart. With `options`, the alerts
    are those options replayed on the recorded inputs instead of the live ones."""
    alerts: list[Alert] = []
    outcomes: dict[tuple[int, int], bool] = {}
    ends: dict[tuple[int, int], float] = {}
    offset = 0
    for monitor in monitors:
        raised = monitor.scored_alerts() if options is None else monitor.replay(options)
        alerts += [replace(a, env=a.env + offset) for a in raised]
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
    report: dict[str, Any] = {
        "success_threshold": float(options.success_threshold),
        "stall_seconds": float(options.stall_seconds),
        "stall_epsilon": float(options.stall_epsilon),
        **quality_fields(q),
        "scored_episodes": sum(len(m.outcomes) for m in monitors),
        "by_kind": {k: sum(a.kind == k for a in scored) for k in ALERT_KINDS},
        "predictions": sum(m.predictions for m in monitors),
    }
    sweep = alert_sweep(monitors, options)
    if sweep:
        report["sweep"] = sweep
    return report


def quality_fields(q: AlertQuality) -> dict[str, Any]:
    """`AlertQuality` as report fields (NaN as null)."""
    return {
        "precision": _finite_or_none(q.precision),
        "recall": _finite_or_none(q.recall),
        "mean_lead_s": _finite_or_none(q.mean_lead_s),
        "median_lead_s": _finite_or_none(q.median_lead_s),
        "alerted_episodes": q.alerted_episodes,
        "failed_episodes": q.failed_episodes,
        "true_alerts": q.true_alerts,
    }


def alert_sweep(monitors: list[AlertMonitor], options: AlertOptions) -> list[dict[str, Any]]:
    """Each rule alone at each of `options`' sweep values, replayed on the same episodes:
    rows {"rule", "value", precision, recall, lead times, counts}."""
    rows: list[dict[str, Any]] = []
    for threshold in options.sweep_thresholds:
        alone = replace(options, success_threshold=float(threshold), stall_seconds=_NEVER_S)
        q = merge_quality(monitors, alone)
        rows.append({"rule": "low_success", "value": float(threshold), **quality_fields(q)})
    for seconds in options.sweep_stall_s:
        alone = replace(options, success_threshold=0.0, stall_seconds=float(seconds))
        q = merge_quality(monitors, alone)
        rows.append({"rule": "progress_stall", "value": float(seconds), **quality_fields(q)})
    return rows


def format_alert(alert: Alert) -> str:
    what = "P(success)" if alert.kind == "low_success" else "progress"
    return (
        f"alert env {alert.env} episode {alert.episode} at {alert.time_s:.2f} s: "
        f"{alert.kind} ({what} {alert.value:.3f})"
    )
