"""`python -m bench.learn_quadruped`: train quadruped_joystick_flat for a wall-clock budget,
then measure how well the final policy walks at a commanded 0.5 m/s.

Training is the real loop (`unilab.train.train`, a `Runner` on the task's preset: worker
process, ring buffer, learner) with `run.max_wall_s` as the budget. The evaluation loads the
newest `checkpoints/ckpt_*.pt` with `torch.load(weights_only=True)`, builds the run's policy
with those weights (`build_policy`), and rolls it out deterministically on fresh envs with a fixed command
(vx = 0.5 m/s, vy = 0, yaw rate = 0) for `--eval-seconds`. The score is the mean of
|v_x - 0.5| (base-frame forward velocity from the IMU) over all envs and steps after the
first second (the robot starts from standing); the target is <= 0.2 m/s. Falls (episode
ends before the time limit) are counted and reported; a fallen env restarts from standing.

Writes JSON (curve, evaluation, env steps/s, time split between simulation and update, the
run's profiler table) and a PNG of the learning curve next to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.algos.build import make_task_and_policy
from unilab.bench.common import machine_info, print_table, write_json
from unilab.config import compose
from unilab.config.schema import Config
from unilab.runtime.rollout import StepInfo, rollout
from unilab.train import train
from unilab.utils.checkpoint import list_checkpoints, load_checkpoint
from unilab.utils.metrics import read_metrics

TASK = "quadruped_joystick_flat"
TARGET_SPEED = 0.5
TARGET_ERROR = 0.2
DEFAULT_OUT = "bench/results/learn_quadruped.json"
WARMUP_S = 1.0


def training_config(minutes: float, out_dir: str, overrides: list[str]) -> Config:
    return compose(
        [
            f"task={TASK}",
            "run.total_env_steps=1000000000",
            f"run.max_wall_s={minutes * 60.0}",
            f"run.out_dir={out_dir}",
            "run.quiet=true",
            "run.export=false",
            "logging.tensorboard=false",
            *overrides,
        ]
    )


def evaluate(
    cfg: Config, checkpoint: Path, num_envs: int, seconds: float, seed: int
) -> dict[str, Any]:
    """Deterministic rollout at a fixed forward command; mean |v_x - 0.5| after warm-up."""
    task_cfg = dataclasses.replace(
        cfg.task,
        lin_vel_x=(TARGET_SPEED, TARGET_SPEED),
        lin_vel_y=(0.0, 0.0),
        ang_vel_yaw=(0.0, 0.0),
        standing_fraction=0.0,
        obs_noise=0.0,
        push_interval_s=0.0,
        episode_length_s=max(cfg.task.episode_length_s, seconds + 1.0),
    )
    weights = load_checkpoint(checkpoint)["algo"]["actor"]
    task, policy = make_task_and_policy(
        dataclasses.replace(cfg, task=task_cfg), num_envs, seed, weights=weights
    )
    steps = round(seconds / task.control_dt)
    warmup = round(WARMUP_S / task.control_dt)
    vx = np.zeros((steps, num_envs))
    vel_error = np.zeros((steps, num_envs))
    falls = [0]

    def record(info: StepInfo) -> None:
        vx[info.step - 1] = info.result.extras["base_vx"]
        vel_error[info.step - 1] = info.result.extras["vel_error"]
        falls[0] += int(info.result.terminated.sum())

    rollout(task, policy, steps=steps, on_step=record)
    after = np.abs(vx[warmup:] - TARGET_SPEED)
    return {
        "command": [TARGET_SPEED, 0.0, 0.0],
        "num_envs": num_envs,
        "seconds": seconds,
        "warmup_s": WARMUP_S,
        "mean_abs_vx_error": float(after.mean()),
        "mean_abs_vx_error_with_warmup": float(np.abs(vx - TARGET_SPEED).mean()),
        "mean_vx": float(vx[warmup:].mean()),
        "mean_planar_vel_error": float(vel_error[warmup:].mean()),
        "falls": falls[0],
        "passed": bool(after.mean() <= TARGET_ERROR),
    }


def learning_curve(rows: list[dict[str, Any]]) -> list[dict[str, float]]:
    """(wall s, env steps, mean return, vel_error) per logged iteration."""
    curve = []
    for row in rows:
        sps = row.get("train/steps_per_s")
        if not sps:
            continue
        curve.append(
            {
                "wall_s": row["env_steps"] / sps,
                "env_steps": row["env_steps"],
                "mean_return": row.get("train/mean_return"),
                "vel_error": row.get("task/vel_error"),
                "action_std": row.get("algo/action_std"),
            }
        )
    return curve


def time_split(last: dict[str, Any], wall: float) -> dict[str, float]:
    """Where the time went, from the cumulative counters of the last metrics row."""
    keys = {
        "worker_sim_s": "workers/sim_s",
        "worker_inference_s": "workers/inference_s",
        "worker_write_s": "workers/write_s",
        "worker_wait_s": "workers/wait_s",
        "learner_update_s": "runtime/update_s",
        "learner_wait_s": "runtime/learner_wait_s",
        "learner_publish_s": "runtime/publish_s",
    }
    split = {name: float(last[key]) for name, key in keys.items() if last.get(key) is not None}
    split["train_wall_s"] = wall
    return split


def plot(curve: list[dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wall = [p["wall_s"] / 60 for p in curve]
    fig, left = plt.subplots(figsize=(7, 4))
    left.plot(wall, [p["mean_return"] for p in curve], color="tab:blue")
    left.set_xlabel("wall time (min)")
    left.set_ylabel("mean episode return", color="tab:blue")
    right = left.twinx()
    right.plot(wall, [p["vel_error"] for p in curve], color="tab:orange")
    right.axhline(TARGET_ERROR, color="tab:orange", linestyle=":", linewidth=1)
    right.set_ylabel("training |v_xy - cmd_xy| (m/s)", color="tab:orange")
    left.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.learn_quadruped", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=25.0, help="training wall-clock budget")
    parser.add_argument("--eval-envs", type=int, default=32, help="envs in the evaluation")
    parser.add_argument("--eval-seconds", type=float, default=10.0, help="evaluation length")
    parser.add_argument("--run-dir", help="skip training: evaluate this finished run directory")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. sim.num_envs=128")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.eval_envs < 1 or args.eval_seconds <= WARMUP_S:
        parser.error("--minutes must be > 0, --eval-envs >= 1, --eval-seconds > 1")
    torch.set_num_threads(1)
    started = time.time()
    machine = machine_info()

    if args.run_dir:
        run_path = Path(args.run_dir)
        from unilab.config.compose import config_from_yaml

        cfg = config_from_yaml((run_path / "config.yaml").read_text())
        train_wall = float("nan")
    else:
        out_dir = tempfile.mkdtemp(prefix="learn_quadruped_")
        cfg = training_config(args.minutes, out_dir, list(args.overrides))
        t0 = time.perf_counter()
        run_path = train(cfg).path
        train_wall = time.perf_counter() - t0

    rows = read_metrics(run_path / "metrics.jsonl")
    curve = learning_curve(rows)
    checkpoints = list_checkpoints(run_path / "checkpoints")
    if not checkpoints:
        print(f"no checkpoint in {run_path / 'checkpoints'}", file=sys.stderr)
        return 1
    result = evaluate(cfg, checkpoints[-1], args.eval_envs, args.eval_seconds, seed=12345)
    last = rows[-1] if rows else {}
    summary_file = run_path / "summary.txt"
    doc = {
        "benchmark": "learn_quadruped",
        "task": TASK,
        "command": "python -m bench.learn_quadruped " + " ".join(argv or sys.argv[1:]),
        "machine": machine,
        "run_dir": str(run_path),
        "budget_minutes": args.minutes,
        "overrides": list(args.overrides),
        "config": {
            "num_envs": cfg.sim.num_envs,
            "chunk_len": cfg.runtime.chunk_len,
            "mode": cfg.runtime.mode,
            "num_workers": cfg.runtime.num_workers,
            "actor_hidden": list(cfg.algo.actor_hidden),
            "critic_hidden": list(cfg.algo.critic_hidden),
            "lin_vel_x": list(cfg.task.lin_vel_x),
            "lin_vel_y": list(cfg.task.lin_vel_y),
            "ang_vel_yaw": list(cfg.task.ang_vel_yaw),
        },
        "env_steps": last.get("env_steps"),
        "iterations": last.get("train/iteration"),
        "env_steps_per_s": last.get("train/steps_per_s"),
        "final_mean_return": last.get("train/mean_return"),
        "time_split_s": time_split(last, train_wall),
        "evaluation": result,
        "target": {"mean_abs_vx_error_max": TARGET_ERROR, "minutes_max": 60},
        "curve": curve,
        "summary": summary_file.read_text() if summary_file.is_file() else "",
        "bench_wall_s": time.time() - started,
    }
    out = write_json(args.out, doc)
    plot(curve, out.with_suffix(".png"), f"{TASK}: {cfg.sim.num_envs} envs, {args.minutes:g} min")
    print_table(
        [
            {
                "env steps": doc["env_steps"],
                "steps/s": doc["env_steps_per_s"],
                "return": doc["final_mean_return"],
                "|vx-0.5|": result["mean_abs_vx_error"],
                "mean vx": result["mean_vx"],
                "falls": result["falls"],
                "passed": result["passed"],
            }
        ],
        ["env steps", "steps/s", "return", "|vx-0.5|", "mean vx", "falls", "passed"],
    )
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
