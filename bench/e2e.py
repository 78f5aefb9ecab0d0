"""`unilab bench e2e`: wall time to a target return on the same task and seeds, in one run.

Runners: unilab async (APPO), unilab async with plain PPO, unilab sync (PPO), and Stable-Baselines3 PPO on a gymnasium
vector env of the same task (via unilab's gymnasium wrapper) when the `bench` extra is
installed. Each runner trains until its mean return over the last 100 episodes reaches the
target or the budget runs out; the time counts from the start of training (after start-up).

Ratios: async_vs_sync_time_to_target (sync time / async APPO time),
async_ppo_vs_sync_time_to_target, appo_vs_async_ppo_time_to_target (async PPO time / APPO
time: > 1 when the staleness correction pays), unilab_vs_sb3_time_to_target.

`--task quadruped_joystick_flat --target 2.0 --steps 3000000 --no-sb3` measures the same on
a task where simulation, not the learner, dominates (bench/results/e2e.quadruped.json).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from unilab.bench.common import machine_info, print_table, write_json
from unilab.config import compose
from unilab.train import IterationInfo, Runner, TrainHook, train
from unilab.utils.metrics import read_metrics


def time_to_target(
    rows: list[dict[str, Any]], target: float, key: str = "train/wall_s"
) -> float | None:
    """`key` (wall seconds, or env_steps) of the first row whose mean return reaches target."""
    for row in rows:
        ret = row.get("train/mean_return")
        if ret is not None and ret >= target:
            return float(row[key])
    return None


class StopAtTarget(TrainHook):
    """Ends the run once the mean return reaches the target: the time to it is what is
    measured, and the rest of the budget would only cost bench time."""

    name = "stop_at_target"

    def __init__(self, target: float) -> None:
        self.target = target

    def on_iteration(self, runner: Runner, it: IterationInfo) -> None:
        if it.mean_return is not None and it.mean_return >= self.target:
            runner.request_stop()


def run_unilab(
    task: str, algo: str, mode: str, seed: int, steps: int, out: Path, target: float
) -> dict[str, Any]:
    cfg = compose(
        [
            f"task={task}",
            f"algo={algo}",
            f"runtime.mode={mode}",
            f"run.seed={seed}",
            f"run.total_env_steps={steps}",
            f"run.out_dir={out}",
            "run.quiet=true",
            "run.export=false",
            "logging.tensorboard=false",
        ]
    )
    run = train(cfg, [StopAtTarget(target)])
    return {"rows": read_metrics(run.metrics)}


def run_sb3(
    task: str, seed: int, steps: int, target: float, num_envs: int
) -> dict[str, Any] | None:
    try:
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.vec_env import VecMonitor
    except ImportError:
        print(
            "stable-baselines3 is not installed: the SB3 baseline is skipped "
            "(install the bench extra: .venv/bin/pip install -c constraints.txt -e '.[bench]')",
            file=sys.stderr,
        )
        return None
    from stable_baselines3.common.env_util import make_vec_env

    from unilab.envs.gym_vector import TaskEnv

    # SB3 builds its own VecEnv from single gymnasium envs (the ordinary user's path).
    env = VecMonitor(make_vec_env(lambda: TaskEnv(task), n_envs=num_envs, seed=seed))
    hit: dict[str, float] = {}
    t0 = time.perf_counter()

    class Stop(BaseCallback):
        def _on_step(self) -> bool:
            buf = self.model.ep_info_buffer
            if buf and len(buf) >= 10 and statistics.mean(e["r"] for e in buf) >= target:
                hit["t"] = time.perf_counter() - t0
                return False
            return True

    PPO("MlpPolicy", env, seed=seed, verbose=0).learn(steps, callback=Stop())
    return {"time_to_target_s": hit.get("t")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unilab bench e2e", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, small budget")
    parser.add_argument("--out", default="bench/results/e2e.json")
    parser.add_argument("--task", default="cartpole_balance")
    parser.add_argument("--target", type=float, default=9.0, help="mean return to reach")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=400_000, help="env step budget per unilab run")
    parser.add_argument("--no-sb3", action="store_true", help="skip Stable-Baselines3")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps {args.steps} must be >= 1")
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    steps = 60_000 if args.quick else args.steps
    results: dict[str, list[float | None]] = {"async": [], "async_ppo": [], "sync": [], "sb3": []}
    steps_to: dict[str, list[float | None]] = {"async": [], "async_ppo": [], "sync": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for name, algo, mode in (
                ("async", "appo", "async"),
                ("async_ppo", "ppo", "async"),
                ("sync", "ppo", "sync"),
            ):
                got = run_unilab(args.task, algo, mode, seed, steps, Path(tmp) / name, args.target)
                results[name].append(time_to_target(got["rows"], args.target))
                steps_to[name].append(time_to_target(got["rows"], args.target, "env_steps"))
            skip = args.quick or args.no_sb3
            sb3 = None if skip else run_sb3(args.task, seed, 10 * steps, args.target, 4)
            results["sb3"].append(None if sb3 is None else sb3["time_to_target_s"])

    def med(values: list[float | None]) -> float | None:
        hits = [v for v in values if v is not None]
        return statistics.median(hits) if len(hits) == len(values) and hits else None

    medians = {k: med(v) for k, v in results.items()}
    ratios: dict[str, float | None] = {
        "async_vs_sync_time_to_target": (
            medians["sync"] / medians["async"] if medians["sync"] and medians["async"] else None
        ),
        "async_ppo_vs_sync_time_to_target": (
            medians["sync"] / medians["async_ppo"]
            if medians["sync"] and medians["async_ppo"]
            else None
        ),
        "appo_vs_async_ppo_time_to_target": (
            medians["async_ppo"] / medians["async"]
            if medians["async"] and medians["async_ppo"]
            else None
        ),
        "unilab_vs_sb3_time_to_target": (
            medians["sb3"] / min(medians["sync"] or 1e9, medians["async"] or 1e9)
            if medians["sb3"]
            else None
        ),
    }
    rows = [{"runner": k, "times_s": str(v), "median_s": medians[k]} for k, v in results.items()]
    print_table(rows, ["runner", "times_s", "median_s"])
    print("ratios:", ratios)
    out = write_json(
        args.out,
        {
            "benchmark": "e2e",
            "machine": machine_info(),
            "task": args.task,
            "target_return": args.target,
            "seeds": seeds,
            "budget_env_steps": steps,
            "times_to_target_s": results,
            "env_steps_to_target": steps_to,
            "medians_s": medians,
            "ratios": ratios,
            "targets": {"async_vs_sync_time_to_target": 1.3, "unilab_vs_sb3_time_to_target": 5.0},
        },
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
