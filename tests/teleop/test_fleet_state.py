"""The fleet server's rules, on a clock the test sets: alerts, the request queue's order,
lost robots, and the event log (`unilab.teleop.fleet.state`, `.events`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from unilab.teleop.fleet.events import EventLog, read_events
from unilab.teleop.fleet.state import AlertConfig, FleetState


def status(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": "arm_reach",
        "mode": "running",
        "episode": 1,
        "episode_step": 10,
        "progress": 0.1,
        "predicted_success": 0.9,
        "idle_s": 0.0,
        "error": "",
        "controller": "autopilot",
    }
    body.update(over)
    return body


def kinds(state: FleetState, robot: str) -> set[str]:
    return {kind for (name, kind) in state.alerts if name == robot}


@pytest.fixture
def state(tmp_path: Path) -> Iterator[FleetState]:
    config = AlertConfig(stall_s=1.0, lost_s=0.5, fail_below=0.3)
    log = EventLog(tmp_path / "events.jsonl")
    yield FleetState(config, log)
    log.close()


def test_alerts_rise_and_clear_with_the_status(state: FleetState) -> None:
    state.update("a", status(), 0.0)
    assert kinds(state, "a") == set()
    state.update("a", status(idle_s=1.2), 0.1)
    assert kinds(state, "a") == {"stall"}
    state.update("a", status(idle_s=0.0, predicted_success=0.1), 0.2)
    assert kinds(state, "a") == {"predicted_failure"}
    # No prediction (a new episode's first second) says nothing either way.
    state.update("a", status(predicted_success=None, error="watchdog: no command"), 0.3)
    assert kinds(state, "a") == {"predicted_failure", "error"}
    state.update("a", status(predicted_success=0.8, error="watchdog: no command"), 0.35)
    assert kinds(state, "a") == {"error"}
    state.update("a", status(predicted_success=None), 0.36)
    assert kinds(state, "a") == set()
    # A paused robot is not stalled, and a prediction for a stopped robot says nothing.
    state.update("a", status(mode="stopped", idle_s=9.0, predicted_success=0.0), 0.4)
    assert kinds(state, "a") == set()


def test_lost_on_the_clock_and_back_on_the_next_status(state: FleetState) -> None:
    state.update("a", status(), 0.0)
    state.update("b", status(), 0.0)
    state.check(0.4)
    assert not state.robots["a"].lost
    state.update("b", status(), 0.45)
    state.check(0.6)
    assert state.robots["a"].lost and not state.robots["b"].lost
    assert kinds(state, "a") == {"lost"}
    state.update("a", status(idle_s=5.0), 0.7)  # a lost robot's other alerts wait for it
    assert not state.robots["a"].lost and kinds(state, "a") == {"stall"}


def test_queue_most_urgent_first_then_oldest(state: FleetState) -> None:
    state.update("fail-old", status(predicted_success=0.1), 0.0)
    state.update("stall", status(idle_s=2.0), 1.0)
    state.update("fail-new", status(predicted_success=0.2), 2.0)
    state.update("error", status(error="camera: no frames"), 3.0)
    state.update("asked", status(), 3.0)
    assert state.request_takeover("asked", "olga", 0.5)
    assert not state.request_takeover("nobody", "olga", 0.5)
    queue = state.queue()
    assert [(q["robot"], q["request"]) for q in queue] == [
        ("error", "reset"),
        ("stall", "reset"),
        ("fail-old", "takeover"),
        ("fail-new", "takeover"),
        ("asked", "takeover"),
    ]
    # A teleoperator taking control ends the operator's request.
    state.update("asked", status(controller="alice"), 3.1)
    assert "asked" not in {q["robot"] for q in state.queue()}


def test_delta_sends_only_what_changed(state: FleetState) -> None:
    state.update("a", status(), 0.0)
    state.update("b", status(), 0.0, thumb=b"\xff\xd8jpeg")
    v = state.delta(0, 0.0)["version"]
    state.update("a", status(episode_step=11), 0.1)
    delta = state.delta(v, 0.1)
    assert set(delta["robots"]) == {"a"} and delta["version"] > v
    assert state.delta(0, 0.1)["thumb_versions"] == {"b": 1}
    assert state.thumbnail("b") == b"\xff\xd8jpeg" and state.thumbnail("zz") is None


def test_event_log_has_every_alert_and_robot(state: FleetState, tmp_path: Path) -> None:
    state.update("a", status(), 0.0)
    state.update("a", status(idle_s=3.0), 0.1)
    state.update("a", status(), 0.2)
    state.check(1.0)
    assert state.events is not None
    state.events.close()
    events = read_events(tmp_path / "events.jsonl")
    got = [(e["kind"], e.get("alert")) for e in events]
    assert got == [
        ("robot_joined", None),
        ("alert", "stall"),
        ("alert_cleared", "stall"),
        ("alert", "lost"),
    ]
    assert all(isinstance(e["time"], float) for e in events)


def test_bad_alert_config_is_refused() -> None:
    with pytest.raises(ValueError, match="stall_s > 0"):
        AlertConfig(stall_s=0)
    with pytest.raises(ValueError, match="fail_below"):
        AlertConfig(fail_below=1.5)


def test_a_hostile_status_body_is_clipped(state: FleetState) -> None:
    state.update("a", status(task="x" * 10_000, progress=7.0, episode="one", idle_s=-4), 0.0)
    robot = state.robots["a"]
    assert len(robot.task) == 120 and robot.progress == 1.0
    assert robot.episode == 0 and robot.idle_s == 0.0
