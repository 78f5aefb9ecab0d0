"""What the fleet server knows about each robot, the alerts it derives, and the queue of
requests for the floor operator, ordered by urgency. Pure Python over a clock passed in,
so every rule is tested without sockets.

Alerts (one per robot and kind at a time; raising and clearing each is an event):

- `lost`: no status for `lost_s` (default 0.5 s; hosts report at 10 Hz);
- `stall`: running, yet the robot has not moved for `stall_s` (its host reports `idle_s`);
- `predicted_failure`: predicted success (the policy's, else the host's estimate) below
  `fail_below` (a status without a prediction leaves it as it was);
- `error`: the host reports an error (a watchdog stop, a camera failure, a driver fault).

Requests (the operator's to-do list): `error` -> reset, `stall` -> reset,
`predicted_failure` -> takeover, an operator's "request takeover" -> takeover. Most urgent
first (`URGENCY`), then oldest first. A request lasts as long as its cause.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from unilab.teleop.fleet.events import EventLog

LOST, STALL, PREDICTED_FAILURE, ERROR = "lost", "stall", "predicted_failure", "error"
ALERT_KINDS = (LOST, ERROR, STALL, PREDICTED_FAILURE)
URGENCY = {ERROR: 4, STALL: 3, PREDICTED_FAILURE: 2, "operator": 1}
"""Higher first. An error or a stall stops work now; a predicted failure may still be
saved; an operator's own takeover request waits for a free teleoperator."""
REQUEST_OF = {ERROR: "reset", STALL: "reset", PREDICTED_FAILURE: "takeover"}
MAX_TEXT = 120


@dataclass(frozen=True)
class AlertConfig:
    stall_s: float = 3.0
    lost_s: float = 0.5
    fail_below: float = 0.3

    def __post_init__(self) -> None:
        if not (self.stall_s > 0 and self.lost_s > 0 and 0 <= self.fail_below <= 1):
            raise ValueError(
                f"alerts need stall_s > 0, lost_s > 0 and 0 <= fail_below <= 1 (got {self})"
            )


@dataclass
class Alert:
    robot: str
    kind: str
    since: float
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"robot": self.robot, "kind": self.kind, "since": self.since, "detail": self.detail}


@dataclass
class RobotView:
    name: str
    joined: float
    task: str = ""
    driver: str = ""
    endpoint: str = ""
    mode: str = "stopped"
    stop_reason: str = ""
    episode: int = 0
    episode_step: int = 0
    progress: float | None = None
    predicted_success: float | None = None
    idle_s: float = 0.0
    error: str = ""
    controller: str = ""
    reward: float = 0.0
    tick: int = 0
    host_time: float = 0.0
    sent_time: float = 0.0
    last_seen: float = 0.0
    updates: int = 0
    lost: bool = False
    takeover_requested: str = ""
    """The operator who asked for a takeover ("" when none is pending)."""
    takeover_at: float = 0.0
    thumb: bytes | None = None
    thumb_version: int = 0
    version: int = 0

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "name": self.name,
            "task": self.task,
            "driver": self.driver,
            "endpoint": self.endpoint,
            "mode": self.mode,
            "stop_reason": self.stop_reason,
            "episode": self.episode,
            "episode_step": self.episode_step,
            "progress": self.progress,
            "predicted_success": self.predicted_success,
            "idle_s": self.idle_s,
            "error": self.error,
            "controller": self.controller,
            "reward": self.reward,
            "tick": self.tick,
            "sent_time": self.sent_time,
            "age_s": max(0.0, now - self.last_seen),
            "updates": self.updates,
            "lost": self.lost,
            "takeover_requested": self.takeover_requested,
            "thumb_version": self.thumb_version,
        }


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    return str(value)[:MAX_TEXT] if isinstance(value, str | int | float) else ""


def _int(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _unit(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return min(1.0, max(0.0, float(value)))
    return None


def _float(body: dict[str, Any], key: str) -> float:
    value = body.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


@dataclass
class FleetState:
    """Robots, alerts and requests; every method takes the lock (link and web threads)."""

    config: AlertConfig = field(default_factory=AlertConfig)
    events: EventLog | None = None
    robots: dict[str, RobotView] = field(default_factory=dict)
    alerts: dict[tuple[str, str], Alert] = field(default_factory=dict)
    version: int = 0
    """Rises on every change; a browser asks for what changed since the one it has."""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def _log(self, kind: str, **fields: Any) -> None:
        if self.events is not None:
            self.events.append(kind, **fields)

    def _bump(self, robot: RobotView | None = None) -> None:
        self.version += 1
        if robot is not None:
            robot.version = self.version

    # ------------------------------------------------------------------ input
    def update(
        self,
        name: str,
        body: dict[str, Any],
        now: float,
        *,
        thumb: bytes | None = None,
        sent_time: float = 0.0,
    ) -> None:
        """One status from robot `name`'s host (already decoded and checked)."""
        with self._lock:
            robot = self.robots.get(name)
            if robot is None:
                robot = self.robots[name] = RobotView(name, joined=now)
                self._log("robot_joined", robot=name)
            if robot.lost:
                robot.lost = False
                self._log("robot_back", robot=name)
            robot.task = _text(body, "task")
            robot.driver = _text(body, "driver")
            robot.endpoint = _text(body, "endpoint")
            robot.mode = _text(body, "mode") or "stopped"
            robot.stop_reason = _text(body, "stop_reason")
            robot.episode = _int(body, "episode")
            robot.episode_step = _int(body, "episode_step")
            robot.progress = _unit(body, "progress")
            robot.predicted_success = _unit(body, "predicted_success")
            robot.idle_s = max(0.0, _float(body, "idle_s"))
            robot.error = _text(body, "error")
            robot.controller = _text(body, "controller")
            robot.reward = _float(body, "reward")
            robot.tick = _int(body, "tick")
            robot.host_time = _float(body, "host_time")
            robot.sent_time = sent_time
            robot.last_seen = now
            robot.updates += 1
            if robot.takeover_requested and robot.controller not in ("", "autopilot"):
                robot.takeover_requested = ""  # a teleoperator took control
            if thumb is not None:
                robot.thumb = thumb
                robot.thumb_version += 1
            self._bump(robot)
            self._judge(robot, now)

    def request_takeover(self, name: str, operator: str, now: float) -> bool:
        with self._lock:
            robot = self.robots.get(name)
            if robot is None:
                return False
            robot.takeover_requested = operator or "operator"
            robot.takeover_at = now
            self._bump(robot)
            return True

    def clear_takeover(self, name: str) -> None:
        with self._lock:
            robot = self.robots.get(name)
            if robot is not None and robot.takeover_requested:
                robot.takeover_requested = ""
                self._bump(robot)

    # ------------------------------------------------------------------ alerts
    def check(self, now: float) -> None:
        """Re-judge every robot (the lost timeout runs on the clock, not on messages)."""
        with self._lock:
            for robot in self.robots.values():
                self._judge(robot, now)

    def _judge(self, robot: RobotView, now: float) -> None:
        cfg = self.config
        lost = now - robot.last_seen > cfg.lost_s
        if lost and not robot.lost:
            robot.lost = True
            self._bump(robot)
        present = not robot.lost
        self._set(robot, LOST, robot.lost, now, f"no status for {now - robot.last_seen:.1f} s")
        self._set(
            robot,
            STALL,
            present and robot.mode == "running" and robot.idle_s >= cfg.stall_s,
            now,
            f"running but not moving for {robot.idle_s:.1f} s",
        )
        p = robot.predicted_success
        failing = (
            p < cfg.fail_below if p is not None else (robot.name, PREDICTED_FAILURE) in self.alerts
        )
        self._set(
            robot,
            PREDICTED_FAILURE,
            # No prediction (the first second of an episode) leaves the alert as it was:
            # otherwise a failing robot's alert and request would restart every episode.
            present and robot.mode == "running" and failing,
            now,
            f"predicted success {p:.2f} < {cfg.fail_below:.2f}" if p is not None else "",
        )
        self._set(robot, ERROR, present and bool(robot.error), now, robot.error)

    def _set(self, robot: RobotView, kind: str, on: bool, now: float, detail: str) -> None:
        key = (robot.name, kind)
        alert = self.alerts.get(key)
        if on and alert is None:
            self.alerts[key] = Alert(robot.name, kind, now, detail)
            self._bump(robot)
            self._log("alert", robot=robot.name, alert=kind, detail=detail)
        elif not on and alert is not None:
            del self.alerts[key]
            self._bump(robot)
            self._log("alert_cleared", robot=robot.name, alert=kind, after_s=now - alert.since)

    # ------------------------------------------------------------------ output
    def queue(self) -> list[dict[str, Any]]:
        """Reset and takeover requests, most urgent first, then oldest first."""
        with self._lock:
            return self._queue()

    def _queue(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for (name, kind), alert in self.alerts.items():
            if kind in REQUEST_OF:
                out.append(
                    {
                        "robot": name,
                        "request": REQUEST_OF[kind],
                        "reason": kind,
                        "detail": alert.detail,
                        "urgency": URGENCY[kind],
                        "since": alert.since,
                    }
                )
        for robot in self.robots.values():
            if robot.takeover_requested:
                out.append(
                    {
                        "robot": robot.name,
                        "request": "takeover",
                        "reason": "operator",
                        "detail": f"requested by {robot.takeover_requested}",
                        "urgency": URGENCY["operator"],
                        "since": robot.takeover_at,
                    }
                )
        out.sort(key=lambda r: (-r["urgency"], r["since"], r["robot"]))
        return out

    def delta(self, since: int, now: float) -> dict[str, Any]:
        """What changed after version `since`: robots (without thumbnails), every alert and
        the queue (both small), the robots whose thumbnail is newer, and the new version."""
        with self._lock:
            changed = [r for r in self.robots.values() if r.version > since]
            return {
                "version": self.version,
                "robots": {r.name: r.to_json(now) for r in changed},
                "alerts": [a.to_json() for a in self.alerts.values()],
                "queue": self._queue(),
                "thumb_versions": {r.name: r.thumb_version for r in changed if r.thumb},
            }

    def is_lost(self, name: str) -> bool:
        with self._lock:
            robot = self.robots.get(name)
            return robot is not None and robot.lost

    def robot_json(self, name: str, now: float) -> dict[str, Any] | None:
        with self._lock:
            robot = self.robots.get(name)
            return None if robot is None else robot.to_json(now)

    def thumbnail(self, name: str) -> bytes | None:
        with self._lock:
            robot = self.robots.get(name)
            return None if robot is None else robot.thumb

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self.robots)
