"""Live failure alerts from the policy's own success and progress predictions.

While a fleet runs, the VLA's value heads predict each env's probability of success and its
task progress every control step. `FailureAlerter` turns those into alerts a floor
operator can act on before the episode is lost:

- `low_success`: the predicted success probability fell below `success_threshold`;
- `progress_stall`: predicted progress has not risen more than `stall_epsilon` above its
  best value (since the last rise) for `stall_seconds`. Measuring against the best value
  rather than the previous step means noise cannot keep re-arming the timer, and a robot
  that lost progress (dropped the object) stays "stalled" until it passes its old best.

Each kind fires at most once per episode and is re-armed by `reset(env_ids)` when those
envs start a new episode. `step` is vectorised over the N envs and does no logging or I/O:
it runs inside the control loop. Step k of an episode (k = 0 on the first call after a
reset) is at time k * dt.

`alert_quality` scores alerts against what happened: precision (alerted episodes that did
fail), recall (failed episodes that were alerted) and the lead time from an episode's first
alert to its end, which is how long an operator had to step in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

ALERT_KINDS = ("low_success", "progress_stall")

EpisodeKey = tuple[int, int]
"""(env, episode): `episode` counts the env's resets, 0 for its first episode."""


@dataclass(frozen=True)
class Alert:
    """One alert: which env and episode, when (episode step and seconds), why, and the
    prediction that raised it (success probability or progress)."""

    env: int
    episode: int
    step: int
    time_s: float
    kind: str
    value: float


class FailureAlerter:
    """Per-step alerts for N envs; see the module docstring for the two rules."""

    def __init__(
        self,
        num_envs: int,
        success_threshold: float = 0.5,
        stall_seconds: float = 5.0,
        stall_epsilon: float = 0.02,
        dt: float = 0.1,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if not 0.0 <= success_threshold <= 1.0:
            raise ValueError(f"success_threshold must be in [0, 1], got {success_threshold}")
        if not (math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a finite number of seconds > 0, got {dt}")
        if not (math.isfinite(stall_seconds) and stall_seconds > 0):
            raise ValueError(f"stall_seconds must be a finite number > 0, got {stall_seconds}")
        if not (math.isfinite(stall_epsilon) and stall_epsilon >= 0):
            raise ValueError(f"stall_epsilon must be a finite number >= 0, got {stall_epsilon}")
        self.num_envs = int(num_envs)
        self.success_threshold = float(success_threshold)
        self.stall_seconds = float(stall_seconds)
        self.stall_epsilon = float(stall_epsilon)
        self.dt = float(dt)
        # Whole steps without a rise that make a stall; the small slack keeps 1.0 s / 0.1 s
        # at 10 steps despite floating-point division.
        self.stall_steps = max(1, math.ceil(self.stall_seconds / self.dt - 1e-9))
        n = self.num_envs
        self.step_count: np.ndarray = np.zeros(n, dtype=np.int64)
        self.episode: np.ndarray = np.zeros(n, dtype=np.int64)
        self.best_progress: np.ndarray = np.full(n, -np.inf)
        self.last_rise_step: np.ndarray = np.zeros(n, dtype=np.int64)
        self.success_alerted: np.ndarray = np.zeros(n, dtype=bool)
        self.stall_alerted: np.ndarray = np.zeros(n, dtype=bool)

    def reset(self, env_ids: Iterable[int] | np.ndarray | None = None) -> None:
        """Start a new episode in `env_ids` (env indices, or an (N,) bool mask such as the
        step's `done`; all envs when None): re-arm both alerts. An env that has not stepped
        since its last reset keeps its episode number, so a reset before the first step
        leaves the first episode at 0."""
        if env_ids is None:
            ids = np.arange(self.num_envs)
        else:
            given = np.asarray(env_ids if isinstance(env_ids, np.ndarray) else list(env_ids))
            if given.dtype == bool:
                if given.shape != (self.num_envs,):
                    raise ValueError(
                        f"a reset mask must have shape ({self.num_envs},), got {given.shape}"
                    )
                given = np.flatnonzero(given)
            ids = given.astype(np.int64).reshape(-1)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.num_envs):
            raise ValueError(f"env ids {ids.tolist()} are outside [0, {self.num_envs})")
        self.episode[ids] += self.step_count[ids] > 0
        self.step_count[ids] = 0
        self.best_progress[ids] = -np.inf
        self.last_rise_step[ids] = 0
        self.success_alerted[ids] = False
        self.stall_alerted[ids] = False

    def step(self, success_prob: np.ndarray, progress: np.ndarray) -> list[Alert]:
        """Feed one control step's (N,) predictions; returns the alerts it raised (often
        none). A NaN success probability raises no alert; NaN progress is not a rise."""
        success = np.asarray(success_prob, dtype=np.float64)
        prog = np.asarray(progress, dtype=np.float64)
        if success.shape != (self.num_envs,) or prog.shape != (self.num_envs,):
            raise ValueError(
                f"predictions must have shape ({self.num_envs},), got success "
                f"{success.shape} and progress {prog.shape}"
            )
        k = self.step_count
        rose = prog > self.best_progress + self.stall_epsilon
        self.best_progress = np.where(rose, prog, self.best_progress)
        self.last_rise_step = np.where(rose, k, self.last_rise_step)

        low = (success < self.success_threshold) & ~self.success_alerted
        stalled = (k - self.last_rise_step >= self.stall_steps) & ~self.stall_alerted
        self.success_alerted |= low
        self.stall_alerted |= stalled

        alerts: list[Alert] = []
        if low.any() or stalled.any():
            for env in np.flatnonzero(low):
                alerts.append(self._alert(int(env), "low_success", float(success[env])))
            for env in np.flatnonzero(stalled):
                alerts.append(self._alert(int(env), "progress_stall", float(prog[env])))
        self.step_count = k + 1
        return alerts

    def _alert(self, env: int, kind: str, value: float) -> Alert:
        step = int(self.step_count[env])
        return Alert(env, int(self.episode[env]), step, step * self.dt, kind, value)


@dataclass(frozen=True)
class AlertQuality:
    """How useful a set of alerts was. Ratios are NaN when undefined (no alerted episodes
    for precision, no failed episodes for recall, no true alerts for lead times)."""

    precision: float
    recall: float
    mean_lead_s: float
    median_lead_s: float
    alerted_episodes: int
    failed_episodes: int
    true_alerts: int
    """Alerted episodes that failed."""


def _by_episode(
    values: Mapping[EpisodeKey, float] | Mapping[EpisodeKey, bool] | Sequence[float] | np.ndarray,
) -> dict[EpisodeKey, float]:
    # An array holds one episode per env (episode 0 of env i), the common evaluation.
    if isinstance(values, Mapping):
        return {(int(e), int(i)): float(v) for (e, i), v in values.items()}
    return {(env, 0): float(v) for env, v in enumerate(np.asarray(values).reshape(-1))}


def alert_quality(
    alerts: Iterable[Alert],
    episode_outcomes: Mapping[EpisodeKey, bool] | Sequence[bool] | np.ndarray,
    episode_end_times: Mapping[EpisodeKey, float] | Sequence[float] | np.ndarray,
) -> AlertQuality:
    """Precision, recall and lead times of `alerts` against what the episodes did.

    `episode_outcomes` is True for an episode that succeeded, False for one that failed;
    `episode_end_times` is when it ended, in seconds from its start (the alerts' clock).
    Both map (env, episode) to a value, or are arrays with one episode per env. An
    episode's lead time is its end time minus the time of its first alert of any kind.
    """
    outcomes = {key: bool(v) for key, v in _by_episode(episode_outcomes).items()}
    ends = _by_episode(episode_end_times)
    missing = sorted(set(outcomes) - set(ends))
    if missing:
        raise ValueError(f"episodes {missing} have an outcome but no end time")
    first_alert: dict[EpisodeKey, float] = {}
    for alert in alerts:
        key = (alert.env, alert.episode)
        if key not in outcomes:
            raise ValueError(
                f"an alert names (env {alert.env}, episode {alert.episode}), which has no outcome"
            )
        first_alert[key] = min(first_alert.get(key, math.inf), alert.time_s)
    failed = {key for key, success in outcomes.items() if not success}
    true_alerted = [key for key in first_alert if key in failed]
    leads = np.array([ends[key] - first_alert[key] for key in true_alerted], dtype=np.float64)
    return AlertQuality(
        precision=len(true_alerted) / len(first_alert) if first_alert else math.nan,
        recall=len(true_alerted) / len(failed) if failed else math.nan,
        mean_lead_s=float(leads.mean()) if leads.size else math.nan,
        median_lead_s=float(np.median(leads)) if leads.size else math.nan,
        alerted_episodes=len(first_alert),
        failed_episodes=len(failed),
        true_alerts=len(true_alerted),
    )
