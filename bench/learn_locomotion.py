"""`unilab bench learn_locomotion --task T`: train a locomotion task on its preset for a
wall-clock budget, then measure how well the final policy walks at a fixed forward command.

Tasks (each also has its own bench name, the JSON's `benchmark` and default output):
- `quadruped_joystick_flat` (`learn_quadruped`): vx = 0.5 m/s; target mean |v_x - 0.5|
  <= 0.2 m/s over 32 envs x 10 s.
- `humanoid_walk` (`learn_humanoid`): vx = 0.5 m/s, the middle of the task's commanded
  range [0, 1]; targets mean |v_x - 0.5| <= 0.25 m/s and a fall rate <= 5 % over 100
  evaluation episodes of 20 s (the task's episode length).
- `quadruped_joystick_rough` (`learn_quadruped_rough`): the curriculum level the training
  reached (the top once any env mastered it, `task/terrain_graduations`; else the peak of
  `task/terrain_level`, the mean level of the training envs), and tracking at vx = 0.5 m/s with every env pinned to the hardest level of the run's terrain
  (`task.terrain.num_levels - 1`); target mean |v_x - 0.5| <= 0.25 m/s over 96 envs
  (16 per terrain kind) x 10 s.

Training is the real loop (`unilab.train.train`: worker process, ring buffer, learner) with
`run.max_wall_s` as the budget. The evaluation (bench/locomotion_eval.py) loads the newest
checkpoint's actor and runs one deterministic episode per env; a fall is an episode that
ends by termination before its time limit. Writes JSON (evaluation, curve, env steps/s,
where the time went: worker simulation vs learner update, the run's profiler) and a PNG of
the learning curve next to it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch

from unilab.bench.common import machine_info, print_table, write_json
from unilab.bench.locomotion_eval import evaluate, hardest_level
from unilab.config import compose
from unilab.config.schema import Config
from unilab.train import train
from unilab.utils.checkpoint import list_checkpoints
from unilab.utils.metrics import read_metrics

LEVEL_METRIC = "task/terrain_level"
"""What the rough task logs for its curriculum: the batch mean of the envs' levels."""
TOP_METRIC = "task/terrain_top"
"""The share of envs on the top level."""
GRADUATION_METRIC = "task/terrain_graduations"
"""Per env, how often it mastered the top level (cumulative; the batch mean is logged)."""


@dataclass(frozen=True)
class LocomotionBench:
    """One task's bench: its name, the evaluation command and what counts as passing."""

    name: str
    task: str
    command_vx: float
    max_vx_error: float
    max_fall_rate: float | None
    """None: falls are reported but do not decide `passed`."""
    minutes: float
    """Default training budget."""
    minutes_max: float | None
    """The budget the target is meant for (recorded in `target`)."""
    eval_envs: int
    eval_seconds: float
    pin_hardest_level: bool = False

    @property
    def default_out(self) -> str:
        return f"bench/results/{self.name}.json"


BENCHES = {
    bench.task: bench
    for bench in (
        LocomotionBench(
            name="learn_quadruped",
            task="quadruped_joystick_flat",
            command_vx=0.5,
            max_vx_error=0.2,
            max_fall_rate=None,
            minutes=25.0,
            minutes_max=60.0,
            eval_envs=32,
            eval_seconds=10.0,
        ),
        LocomotionBench(
            name="learn_humanoid",
            task="humanoid_walk",
            command_vx=0.5,  # the middle of humanoid_walk's lin_vel_x range [0, 1]
            max_vx_error=0.25,
            max_fall_rate=0.05,
            minutes=60.0,
            minutes_max=60.0,
            eval_envs=100,
            eval_seconds=20.0,  # the task's episode length
        ),
        LocomotionBench(
            name="learn_quadruped_rough",
            task="quadruped_joystick_rough",
            command_vx=0.5,
            max_vx_error=0.25,
            max_fall_rate=None,
            minutes=60.0,
            minutes_max=None,
            eval_envs=96,  # 16 envs on each of the 6 terrain kinds
            eval_seconds=10.0,
            pin_hardest_level=True,
        ),
    )
}
WARMUP_S = 1.0


def training_config(task: str, minutes: float, out_dir: str | None, overrides: list[str]) -> Config:
    """The preset configs/<task>/ppo.yaml, stopped by the wall-clock budget alone."""
    return compose(
        [
            f"task={task}",
            "run.total_env_steps=1000000000",  # the wall-clock budget ends the run
            f"run.max_wall_s={minutes * 60.0}",
            *([f"run.out_dir={out_dir}"] if out_dir else []),
            "run.quiet=true",
            "run.export=false",
            "logging.tensorboard=false",
            *overrides,
        ]
    )


MAX_CURVE_POINTS = 500
"""The JSON keeps at most this many curve points (an hour is ~5,000 iterations); the PNG
is drawn from all of them."""


def thinned(curve: list[dict[str, Any]], most: int = MAX_CURVE_POINTS) -> list[dict[str, Any]]:
    """Every k-th point of `curve` and its last, at most about `most` points."""
    if len(curve) <= most:
        return curve
    step = -(-len(curve) // most)
    kept = curve[::step]
    return kept if kept[-1] is curve[-1] else [*kept, curve[-1]]


def learning_curve(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """(wall s, env steps, mean return, vel_error, ...) per logged iteration. The wall time
    adds up the sessions of a resumed run (each logs its own `train/wall_s` from zero)."""
    curve = []
    offset, last = 0.0, 0.0
    for row in rows:
        wall = row.get("train/wall_s")
        if wall is None:
            continue
        if wall < last:  # a resumed session starts its clock again
            offset += last
        last = float(wall)
        point = {
            "wall_s": offset + last,
            "env_steps": row["env_steps"],
            "mean_return": row.get("train/mean_return"),
            "vel_error": row.get("task/vel_error"),
            "action_std": row.get("algo/action_std"),
        }
        if row.get(LEVEL_METRIC) is not None:
            point["terrain_level"] = row[LEVEL_METRIC]
        if row.get(TOP_METRIC) is not None:
            point["terrain_top"] = row[TOP_METRIC]
        curve.append(point)
    return curve


def curriculum(rows: list[dict[str, Any]], cfg: Config) -> dict[str, Any] | None:
    """The terrain level the training reached; None for a task without a curriculum.
    Envs that master the top level restart on a random one, so the mean level stays below
    the top even for a policy that walks every level: `graduations` counts those masteries
    (all envs, whole run, resumed sessions added up), and `level_reached` is the top once
    there is one, else the peak mean level, rounded."""
    top = hardest_level(cfg)
    if top is None:
        return None
    levels = [float(r[LEVEL_METRIC]) for r in rows if r.get(LEVEL_METRIC) is not None]
    tops = [float(r[TOP_METRIC]) for r in rows if r.get(TOP_METRIC) is not None]
    grads = [float(r[GRADUATION_METRIC]) for r in rows if r.get(GRADUATION_METRIC) is not None]
    final = levels[-1] if levels else None
    graduations = round(cumulative(grads) * int(cfg.sim.num_envs)) if grads else None
    if graduations:
        reached: int | None = top
    else:
        reached = None if not levels else min(top, max(0, round(max(levels))))
    return {
        "metric": LEVEL_METRIC,
        "num_levels": top + 1,
        "hardest_level": top,
        "max_init_level": int(cfg.task.max_init_level),
        "final_mean_level": final,
        "peak_mean_level": max(levels) if levels else None,
        "final_top_fraction": tops[-1] if tops else None,
        "peak_top_fraction": max(tops) if tops else None,
        "graduations": graduations,
        "level_reached": reached,
    }


def cumulative(counts: list[float]) -> float:
    """The total of a counter logged cumulatively by a process that may restart (a resumed
    run counts from zero again): each drop adds the count reached before it."""
    total = 0.0
    for before, after in pairwise(counts):
        if after < before:
            total += before
    return total + (counts[-1] if counts else 0.0)


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


def plot(
    curve: list[dict[str, Any]], path: Path, title: str, bench: LocomotionBench, top: int | None
) -> None:
    """Return and training velocity error against wall time; below, for a curriculum, the
    mean terrain level against the hardest level `top`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = [p for p in curve if p.get("terrain_level") is not None]
    fig, axes = plt.subplots(2 if levels else 1, 1, figsize=(7, 6 if levels else 4), squeeze=False)
    left = axes[0][0]
    wall = [p["wall_s"] / 60 for p in curve]
    left.plot(wall, [p["mean_return"] for p in curve], color="tab:blue")
    left.set_xlabel("wall time (min)")
    left.set_ylabel("mean episode return", color="tab:blue")
    right = left.twinx()
    right.plot(wall, [p["vel_error"] for p in curve], color="tab:orange")
    right.axhline(bench.max_vx_error, color="tab:orange", linestyle=":", linewidth=1)
    right.set_ylabel("training |v_xy - cmd_xy| (m/s)", color="tab:orange")
    left.set_title(title)
    if levels:
        low = axes[1][0]
        low.plot([p["wall_s"] / 60 for p in levels], [p["terrain_level"] for p in levels])
        low.set_xlabel("wall time (min)")
        low.set_ylabel("mean terrain level")
        if top is not None:
            low.axhline(top, color="tab:red", linestyle=":", linewidth=1)
            low.set_ylim(-0.1, top + 0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def verdict(bench: LocomotionBench, ev: dict[str, Any]) -> dict[str, Any]:
    """`passed`, `target`, and the report's `ratios`/`targets` (each ratio >= its target
    passes: the error target over the error, the share of episodes without a fall)."""
    error = ev["mean_abs_vx_error"]
    passed = error is not None and error <= bench.max_vx_error
    ratios: dict[str, float | None] = {
        "target_over_vx_error": None if error is None else bench.max_vx_error / max(error, 1e-9)
    }
    targets = {"target_over_vx_error": 1.0}
    target: dict[str, Any] = {
        "mean_abs_vx_error_max": bench.max_vx_error,
        "minutes_max": bench.minutes_max,
    }
    if bench.max_fall_rate is not None:
        passed = passed and ev["fall_rate"] <= bench.max_fall_rate
        ratios["episodes_without_fall"] = 1.0 - ev["fall_rate"]
        targets["episodes_without_fall"] = 1.0 - bench.max_fall_rate
        target["fall_rate_max"] = bench.max_fall_rate
    return {"passed": passed, "target": target, "ratios": ratios, "targets": targets}


def run_bench(
    bench: LocomotionBench, argv: list[str], prog: str, started: float, task_option: bool
) -> int:
    """Parse argv, train (unless --run-dir), evaluate, write JSON and PNG; the exit code."""
    description = " ".join(__doc__.split("\n\n")[0].split()) if __doc__ else ""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    if task_option:  # already read by main(); declared again for --help and the parse
        parser.add_argument(
            "--task", choices=list(BENCHES), default=bench.task, help="the task to measure"
        )
    add_options(parser, bench)
    args = parser.parse_intermixed_args(argv)  # overrides may come before options too
    if args.minutes <= 0 or args.eval_envs < 1 or not 0 <= args.warmup_s < args.eval_seconds:
        parser.error("--minutes must be > 0, --eval-envs >= 1, 0 <= --warmup-s < --eval-seconds")
    torch.set_num_threads(1)
    machine = machine_info()
    if args.run_dir:
        from unilab.config.compose import config_from_yaml

        run_path = Path(args.run_dir)
        cfg = config_from_yaml((run_path / "config.yaml").read_text())
        train_wall = float("nan")
        budget = cfg.run.max_wall_s / 60.0 if cfg.run.max_wall_s else args.minutes
    else:
        budget = args.minutes
        # Runs go to a fresh temporary directory unless a run.out_dir override says where.
        given = any(o.startswith("run.out_dir=") for o in args.overrides)
        out_dir = None if given else tempfile.mkdtemp(prefix=f"{bench.name}_")
        cfg = training_config(bench.task, args.minutes, out_dir, list(args.overrides))
        t0 = time.perf_counter()
        run_path = train(cfg).path
        train_wall = time.perf_counter() - t0
    if cfg.task.name != bench.task:
        parser.error(f"the run trained {cfg.task.name!r}, this bench measures {bench.task!r}")

    rows = read_metrics(run_path / "metrics.jsonl")
    checkpoints = list_checkpoints(run_path / "checkpoints")
    if not checkpoints:
        print(f"no checkpoint in {run_path / 'checkpoints'}", file=sys.stderr)
        return 1
    ev = evaluate(
        cfg,
        checkpoints[-1],
        bench.command_vx,
        args.eval_envs,
        args.eval_seconds,
        args.warmup_s,
        args.seed,
        pin_hardest_level=bench.pin_hardest_level,
    )
    judged = verdict(bench, ev)
    ev["passed"] = judged["passed"]  # where learn_quadruped has always kept it
    last = rows[-1] if rows else {}
    levels = curriculum(rows, cfg)
    summary_txt, summary_json = run_path / "summary.txt", run_path / "summary.json"
    run_summary = json.loads(summary_json.read_text()) if summary_json.is_file() else {}
    curve = learning_curve(rows)
    doc = {
        "benchmark": bench.name,
        "task": bench.task,
        "command": " ".join([prog, *argv]),
        "machine": machine,
        "run_dir": str(run_path),
        "budget_minutes": budget,
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
        "profile_s": run_summary.get("profile_s"),
        "curriculum": levels,
        "evaluation": ev,
        **judged,
        "rows": [table_row(ev, last, levels)],
        "curve": thinned(curve),
        "summary": summary_txt.read_text() if summary_txt.is_file() else "",
        "bench_wall_s": time.perf_counter() - started,
    }
    out = write_json(args.out, doc)
    trained_min = curve[-1]["wall_s"] / 60.0 if curve else budget  # all sessions of a resume
    title = f"{bench.task}: {cfg.sim.num_envs} envs, {trained_min:.0f} min"
    plot(curve, out.with_suffix(".png"), title, bench, hardest_level(cfg))
    print_table(doc["rows"], list(doc["rows"][0]))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


def table_row(
    ev: dict[str, Any], last: dict[str, Any], levels: dict[str, Any] | None
) -> dict[str, Any]:
    """The bench's one row in BENCHMARKS.md and on the console."""
    row = {
        "env steps": last.get("env_steps"),
        "steps/s": last.get("train/steps_per_s"),
        "sim s": last.get("workers/sim_s"),
        "update s": last.get("runtime/update_s"),
        "vx error": ev["mean_abs_vx_error"],  # no "|": the row is a markdown table row
        "mean vx": ev["mean_vx"],
        "fall rate": ev["fall_rate"],
    }
    if levels is not None:
        row["level reached"] = levels["level_reached"]
        row["hardest level"] = levels["hardest_level"]
        row["top-level masteries"] = levels["graduations"]
    return row | {"passed": ev["passed"]}


def add_options(parser: argparse.ArgumentParser, bench: LocomotionBench) -> None:
    add = parser.add_argument
    add("--minutes", type=float, default=bench.minutes, help="training wall-clock budget")
    add("--eval-envs", type=int, default=bench.eval_envs, help="evaluation episodes (one per env)")
    add("--eval-seconds", type=float, default=bench.eval_seconds, help="evaluation episode (s)")
    add("--warmup-s", type=float, default=WARMUP_S, help="left out of the tracking error (s)")
    add("--seed", type=int, default=12345, help="evaluation seed")
    add("--run-dir", help="skip training: evaluate this finished run directory")
    add("--out", default=bench.default_out, help="JSON output; the PNG goes next to it")
    add("overrides", nargs="*", help="config overrides, e.g. sim.num_envs=128")


def main(argv: list[str] | None = None) -> int:
    """`unilab bench learn_locomotion [--task T] [options]`."""
    started = time.perf_counter()
    argv = list(sys.argv[1:] if argv is None else argv)
    picker = argparse.ArgumentParser(prog="unilab bench learn_locomotion", add_help=False)
    picker.add_argument("--task", choices=list(BENCHES), default="quadruped_joystick_flat")
    task = picker.parse_known_args(argv)[0].task
    return run_bench(BENCHES[task], argv, "unilab bench learn_locomotion", started, True)


def main_for(task: str, name: str, argv: list[str] | None) -> int:
    """Entry point of a bench that names its task (learn_quadruped, learn_humanoid, ...)."""
    started = time.perf_counter()
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_bench(BENCHES[task], argv, f"unilab bench {name}", started, False)


if __name__ == "__main__":
    raise SystemExit(main())
