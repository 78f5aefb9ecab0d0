"""Live failure alerts: low predicted success fires once per episode at the first step below
the threshold, a progress stall fires exactly `stall_seconds` after the last rise, `reset`
re-arms both, and `alert_quality` scores alerts on a constructed set of episodes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from unilab.deploy.failure_alerts import Alert, FailureAlerter, alert_quality


def _run(alerter: FailureAlerter, success: np.ndarray, progress: np.ndarray) -> list[Alert]:
    """Feed (T, N) traces step by step; all alerts raised."""
    alerts: list[Alert] = []
    for t in range(success.shape[0]):
        alerts += alerter.step(success[t], progress[t])
    return alerts


def test_low_success_fires_once_at_the_first_step_below_threshold() -> None:
    alerter = FailureAlerter(3, success_threshold=0.3, stall_seconds=100.0, dt=0.1)
    # env 0 dips below 0.3 at step 4, recovers, dips again at step 7; env 1 never does;
    # env 2 starts below the threshold.
    success = np.array(
        [
            [0.9, 0.9, 0.1],
            [0.8, 0.9, 0.1],
            [0.6, 0.9, 0.1],
            [0.31, 0.9, 0.1],
            [0.29, 0.9, 0.1],
            [0.5, 0.9, 0.1],
            [0.4, 0.3, 0.1],  # exactly 0.3 is not below
            [0.1, 0.9, 0.1],
        ]
    )
    progress = np.tile(np.linspace(0, 1, 8)[:, None], (1, 3))  # rising: no stall
    alerts = _run(alerter, success, progress)
    assert [(a.env, a.step, a.kind) for a in alerts] == [
        (2, 0, "low_success"),
        (0, 4, "low_success"),
    ]
    assert alerts[1].time_s == pytest.approx(0.4)
    assert alerts[1].value == pytest.approx(0.29)
    assert all(a.episode == 0 for a in alerts)


def test_reset_rearms_only_the_reset_envs() -> None:
    alerter = FailureAlerter(2, success_threshold=0.5, stall_seconds=100.0, dt=0.05)
    low = np.array([0.1, 0.1])
    progress = np.zeros(2)
    first = alerter.step(low, progress)
    assert sorted(a.env for a in first) == [0, 1]
    assert alerter.step(low, progress + 1) == []  # already alerted this episode
    alerter.reset([1])
    again = alerter.step(low, progress + 2)
    assert [(a.env, a.episode, a.step, a.time_s) for a in again] == [(1, 1, 0, 0.0)]
    alerter.reset()  # all envs
    assert sorted((a.env, a.episode) for a in alerter.step(low, progress)) == [(0, 1), (1, 2)]
    alerter.reset([0])
    alerter.reset([0])  # no step in between: still the same new episode
    assert alerter.step(low, progress)[0].episode == 2
    alerter.reset(np.array([False, True]))  # a done mask: env 1 only
    assert [(a.env, a.episode) for a in alerter.step(low, progress)] == [(1, 3)]
    with pytest.raises(ValueError, match=r"env ids \[2\] are outside \[0, 2\)"):
        alerter.reset([2])


def test_progress_stall_fires_exactly_stall_seconds_after_the_last_rise() -> None:
    # dt 0.1 s, stall after 1.0 s = 10 steps without a rise of more than 0.05 over the best.
    alerter = FailureAlerter(
        2, success_threshold=0.0, stall_seconds=1.0, stall_epsilon=0.05, dt=0.1
    )
    steps = 30
    progress = np.zeros((steps, 2))
    # env 0: rises 0.1 per step up to step 5 (best 0.5 at step 5), then creeps by 0.01 a
    # step (never 0.05 above the best of 0.5 until step 11, 0.56 > 0.55), then flat.
    progress[:6, 0] = np.arange(6) * 0.1
    progress[6:11, 0] = 0.5 + np.arange(1, 6) * 0.01  # 0.51 .. 0.55: not a rise
    progress[11:, 0] = 0.56  # a rise at step 11 (0.56 > 0.5 + 0.05), then flat
    # env 1: drops at step 3 and recovers to just below its old best: no rise since step 0.
    progress[:, 1] = 0.3
    progress[3:6, 1] = 0.0
    progress[6:, 1] = 0.34
    alerts = _run(alerter, np.ones((steps, 2)), progress)
    stalls = [(a.env, a.step) for a in alerts]
    assert all(a.kind == "progress_stall" for a in alerts)
    # env 0: last rise at step 11 -> alert at step 21; env 1: last rise at 0 -> step 10.
    assert sorted(stalls) == [(0, 21), (1, 10)]
    by_env = {a.env: a for a in alerts}
    assert by_env[0].time_s == pytest.approx(2.1)
    assert by_env[0].value == pytest.approx(0.56)
    assert by_env[1].time_s == pytest.approx(1.0)


def test_stall_step_count_is_robust_to_float_division() -> None:
    # 0.3 / 0.1 is 2.9999999999999996 in floating point; the stall is still 3 steps.
    alerter = FailureAlerter(1, success_threshold=0.0, stall_seconds=0.3, dt=0.1)
    assert alerter.stall_steps == 3
    alerts = _run(alerter, np.ones((5, 1)), np.zeros((5, 1)))
    assert [a.step for a in alerts] == [3]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match=r"success_threshold must be in \[0, 1\], got 1.5"):
        FailureAlerter(1, success_threshold=1.5)
    with pytest.raises(ValueError, match="dt must be a finite number of seconds > 0, got 0"):
        FailureAlerter(1, dt=0)
    with pytest.raises(ValueError, match="stall_seconds must be a finite number > 0"):
        FailureAlerter(1, stall_seconds=-1.0)
    alerter = FailureAlerter(2)
    with pytest.raises(ValueError, match=r"predictions must have shape \(2,\)"):
        alerter.step(np.ones(3), np.ones(3))


def test_alert_quality_on_a_constructed_set() -> None:
    def alert(env: int, episode: int, time_s: float, kind: str = "low_success") -> Alert:
        return Alert(env, episode, round(time_s / 0.1), time_s, kind, 0.0)

    # Six episodes (env, episode): success True/False, end time in seconds.
    outcomes = {
        (0, 0): False,
        (0, 1): True,
        (1, 0): False,
        (2, 0): False,
        (3, 0): True,
        (3, 1): False,
    }
    ends = {(0, 0): 10.0, (0, 1): 8.0, (1, 0): 6.0, (2, 0): 12.0, (3, 0): 9.0, (3, 1): 7.0}
    alerts = [
        alert(0, 0, 4.0, "progress_stall"),
        alert(0, 0, 2.0),  # the first alert of (0, 0) is at 2.0 s: lead 8.0 s
        alert(1, 0, 5.0),  # lead 1.0 s
        alert(3, 0, 3.0),  # a false alarm: (3, 0) succeeded
        alert(3, 1, 4.0),  # lead 3.0 s
    ]
    quality = alert_quality(alerts, outcomes, ends)
    # Alerted episodes: (0,0), (1,0), (3,0), (3,1) -> 3 failed of 4 alerted.
    assert quality.alerted_episodes == 4
    assert quality.true_alerts == 3
    assert quality.precision == pytest.approx(3 / 4)
    # Failed episodes: (0,0), (1,0), (2,0), (3,1) -> 3 of 4 alerted.
    assert quality.failed_episodes == 4
    assert quality.recall == pytest.approx(3 / 4)
    assert quality.mean_lead_s == pytest.approx((8.0 + 1.0 + 3.0) / 3)
    assert quality.median_lead_s == pytest.approx(3.0)


def test_alert_quality_with_arrays_and_no_alerts() -> None:
    # Arrays: one episode per env (episode 0).
    quality = alert_quality([Alert(1, 0, 20, 2.0, "low_success", 0.1)], [True, False], [5.0, 6.5])
    assert (quality.precision, quality.recall, quality.mean_lead_s) == (1.0, 1.0, 4.5)
    empty = alert_quality([], [True, True], [1.0, 1.0])
    assert math.isnan(empty.precision) and math.isnan(empty.recall)
    assert math.isnan(empty.mean_lead_s) and empty.alerted_episodes == 0
    with pytest.raises(ValueError, match=r"\(env 5, episode 0\), which has no outcome"):
        alert_quality([Alert(5, 0, 1, 0.1, "low_success", 0.0)], [True], [1.0])


def test_alerter_end_to_end_scores_its_own_alerts() -> None:
    # Four envs, 50 steps at 0.1 s: envs 0 and 2 fail (success falls after step 20,
    # episode ends at 5.0 s); env 1 succeeds; env 3 succeeds but its progress stalls.
    # stall_epsilon 0.005 < the 0.02 rise per step: every rising step counts as a rise.
    alerter = FailureAlerter(
        4, success_threshold=0.25, stall_seconds=1.5, stall_epsilon=0.005, dt=0.1
    )
    t = np.arange(50)[:, None]
    success = np.where(t < 20, 0.8, 0.1) * np.array([1, 0, 1, 0]) + 0.9 * np.array([0, 1, 0, 1])
    progress = np.minimum(t * 0.02, 1.0) * np.ones((1, 4))
    progress[:, 3] = np.minimum(t[:, 0] * 0.02, 0.3)  # last rise at step 15, then flat
    alerts = _run(alerter, success, progress)
    assert sorted((a.env, a.step, a.kind) for a in alerts) == [
        (0, 20, "low_success"),
        (2, 20, "low_success"),
        (3, 30, "progress_stall"),
    ]
    quality = alert_quality(alerts, [False, True, False, True], [5.0] * 4)
    assert quality.precision == pytest.approx(2 / 3)
    assert quality.recall == 1.0
    assert quality.median_lead_s == pytest.approx(3.0)
