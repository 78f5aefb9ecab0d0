"""Which bench measures each task's preset, and how to say its result in one line.

`unilab list tasks` prints these lines so users know what a preset reaches before they train.
The numbers are read from the bench JSON in bench/results/ at listing time, never copied here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _success(doc: dict[str, Any]) -> str:
    took = doc.get("time_to_target_s")
    when = f" in {took:.0f} s" if took is not None else f" after {doc['env_steps']:,} env steps"
    return f"{doc['final_success']:.0%} success{when}".replace("%", " %", 1)


def _velocity(doc: dict[str, Any]) -> str:
    ev = doc["evaluation"]
    return (
        f"|vx error| {ev['mean_abs_vx_error']:.3f} m/s at vx={ev['command'][0]:g}, "
        f"{ev['falls']} falls, after {doc['budget_minutes']:g} min"
    )


def _metres_per_s(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} m/s"


def _walking(doc: dict[str, Any]) -> str:
    ev = doc["evaluation"]
    return (
        f"|vx error| {_metres_per_s(ev['mean_abs_vx_error'])} at vx={ev['command'][0]:g}, "
        f"{ev['fall_rate']:.0%} falls over {ev['episodes']} episodes, "
        f"after {doc['budget_minutes']:g} min"
    ).replace("%", " %", 1)


def _curriculum(doc: dict[str, Any]) -> str:
    ev, levels = doc["evaluation"], doc["curriculum"]
    return (
        f"terrain level {levels['level_reached']} of 0..{levels['hardest_level']} reached, "
        f"|vx error| {_metres_per_s(ev['mean_abs_vx_error'])} at vx={ev['command'][0]:g} on "
        f"level {levels['hardest_level']}, after {doc['budget_minutes']:g} min"
        + (f" with {' '.join(doc['overrides'])}" if doc.get("overrides") else "")
    )


Summary = Callable[[dict[str, Any]], str]

# task -> (bench name, result files (the newest of them is shown), one-line summary).
# Only results of the task's own preset belong here (runs with overrides measure something
# else: learn_quadruped.json trains forward-only commands).
TASK_RESULTS: dict[str, tuple[str, tuple[str, ...], Summary]] = {
    "arm_reach": ("learn_arm_reach", ("learn_arm_reach.json",), _success),
    "arm_lift_cube": ("learn_arm_lift", ("learn_arm_lift.json",), _success),
    "quadruped_joystick_flat": (
        "learn_quadruped",
        ("learn_quadruped.full_commands.json",),
        _velocity,
    ),
    "humanoid_walk": ("learn_humanoid", ("learn_humanoid.json",), _walking),
    "quadruped_joystick_rough": (
        "learn_quadruped_rough",
        ("learn_quadruped_rough.json",),
        _curriculum,
    ),
}

NOT_MEASURED = "not measured yet"


def _newest(paths: list[Path]) -> tuple[Path, dict[str, Any]] | None:
    docs = []
    for path in paths:
        if path.is_file():
            doc = json.loads(path.read_text())
            docs.append((str(doc.get("machine", {}).get("time_utc", "")), path, doc))
    if not docs:
        return None
    _, path, doc = max(docs, key=lambda d: d[0])
    return path, doc


def task_result(task: str, results_dir: Path = RESULTS_DIR) -> str:
    """One line: the newest measured result of the task's preset, or NOT_MEASURED."""
    entry = TASK_RESULTS.get(task)
    if entry is None:
        return NOT_MEASURED
    bench, files, summary = entry
    found = _newest([results_dir / f for f in files])
    if found is None:
        return NOT_MEASURED
    path, doc = found
    try:
        line = summary(doc)
    except (KeyError, TypeError, ValueError) as exc:
        return f"unreadable result {path.name} ({type(exc).__name__}: {exc})"
    return f"{line} (bench {bench})"
