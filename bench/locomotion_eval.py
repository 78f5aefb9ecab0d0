"""Deterministic evaluation of a locomotion policy at one fixed forward command, for the
learn_* locomotion benches (bench/learn_locomotion.py).

Every env runs exactly one counted episode (`rollout(..., one_per_env=True)`) of
`seconds`: the command is fixed (vx, 0, 0), nothing is random beyond the spawn (no standing
commands, observation noise or pushes). An episode that ends by termination before its time
limit is a fall; after a fall the env runs on uncounted, so each env contributes the steps
of its one episode only. Tracking is measured on those steps after `warmup_s` (every robot
starts from standing): mean |v_x - vx| (base-frame forward velocity from the IMU) and the
task's own `vel_error` metric (planar |v_xy - cmd_xy|).

`hardest_level=True` (tasks with a terrain curriculum) pins every env to the top terrain
level: `task.min_init_level = task.max_init_level = top` with the curriculum off.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from unilab.algos.build import make_task_and_policy
from unilab.config.schema import Config
from unilab.runtime.rollout import StepInfo, rollout
from unilab.tasks.base import TIME_OUT
from unilab.tasks.quadruped_joystick import QuadrupedJoystickRough
from unilab.utils.checkpoint import load_checkpoint


def hardest_level(cfg: Config) -> int | None:
    """The top curriculum level of the run's terrain; None for a task without one."""
    terrain = getattr(cfg.task, "terrain", None)
    return None if terrain is None else int(terrain.num_levels) - 1


def evaluation_config(
    cfg: Config, command_vx: float, seconds: float, pin_hardest_level: bool
) -> Config:
    """`cfg` with the task set up for evaluation (see the module docstring)."""
    changes: dict[str, Any] = {
        "lin_vel_x": (command_vx, command_vx),
        "lin_vel_y": (0.0, 0.0),
        "ang_vel_yaw": (0.0, 0.0),
        "standing_fraction": 0.0,
        "obs_noise": 0.0,
        "push_interval_s": 0.0,
        "episode_length_s": seconds,  # the time limit: ending before it is a fall
    }
    if pin_hardest_level:
        top = hardest_level(cfg)
        if top is None:
            raise ValueError(f"task {cfg.task.name!r} has no terrain levels to pin")
        changes |= {"min_init_level": top, "max_init_level": top, "curriculum": False}
    return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, **changes))


def _mean(values: np.ndarray) -> float | None:
    """Mean of the non-NaN entries; None when there are none (every env fell in warm-up)."""
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if kept.size else None


def evaluate(
    cfg: Config,
    checkpoint: Path,
    command_vx: float,
    num_envs: int,
    seconds: float,
    warmup_s: float,
    seed: int,
    pin_hardest_level: bool = False,
) -> dict[str, Any]:
    """One counted episode per env at command (vx, 0, 0); tracking errors and falls."""
    eval_cfg = evaluation_config(cfg, command_vx, seconds, pin_hardest_level)
    weights = load_checkpoint(checkpoint)["algo"]["actor"]
    task, policy = make_task_and_policy(eval_cfg, num_envs, seed, weights=weights)
    steps = task.max_episode_steps
    warmup = round(warmup_s / task.control_dt)
    # (steps, envs): NaN where the env's counted episode had already ended.
    vx = np.full((steps, num_envs), np.nan)
    planar_error = np.full((steps, num_envs), np.nan)
    running = np.ones(num_envs, dtype=bool)
    fell = np.zeros(num_envs, dtype=bool)

    def record(info: StepInfo) -> None:
        out, t = info.result, info.step - 1
        vx[t, running] = out.extras["base_vx"][running]
        planar_error[t, running] = out.extras["vel_error"][running]
        fell[running & out.terminated] = True
        running[out.terminated | out.truncated] = False

    result = rollout(task, policy, steps=steps, episodes=num_envs, one_per_env=True, on_step=record)
    error = np.abs(vx - command_vx)
    # Termination reasons of the falls (an episode may end for several at once).
    reasons = Counter(r for e in result.episodes for r in e.reasons if r != TIME_OUT)
    low, high = cfg.task.lin_vel_x
    doc: dict[str, Any] = {
        "command": [command_vx, 0.0, 0.0],
        "command_in_training_range": bool(low <= command_vx <= high),
        "num_envs": num_envs,
        "episodes": len(result.episodes),
        "seconds": seconds,
        "warmup_s": warmup_s,
        "seed": seed,
        "deterministic": True,
        "mean_abs_vx_error": _mean(error[warmup:]),
        "mean_abs_vx_error_with_warmup": _mean(error),
        "mean_vx": _mean(vx[warmup:]),
        "mean_planar_vel_error": _mean(planar_error[warmup:]),
        "falls": int(fell.sum()),
        "fall_rate": float(fell.mean()),
        "fall_reasons": dict(sorted(reasons.items())),
        "mean_episode_s": float(np.mean([e.length for e in result.episodes]) * task.control_dt),
    }
    if isinstance(task, QuadrupedJoystickRough):
        doc["terrain_levels"] = sorted({int(v) for v in task.terrain_levels})
        doc["by_terrain_kind"] = _by_kind(task, error[warmup:], fell)
    task.close()
    return doc


def _by_kind(
    task: QuadrupedJoystickRough, error: np.ndarray, fell: np.ndarray
) -> dict[str, dict[str, Any]]:
    """|v_x error| and fall rate per terrain kind (column of tiles) the envs stood on."""
    out = {}
    for col, kind in enumerate(task.cfg.terrain.kinds):
        envs = task.terrain_kinds == col
        if envs.any():
            out[f"{col}:{kind}"] = {
                "envs": int(envs.sum()),
                "mean_abs_vx_error": _mean(error[:, envs]),
                "fall_rate": float(fell[envs].mean()),
            }
    return out
