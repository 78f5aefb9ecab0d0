"""Train an arm task on its preset, then measure, checkpoint by checkpoint, the fraction of
episodes that end in success: the machinery of `bench.learn_arm_reach` and
`bench.learn_arm_lift` (each names its task and target in an `ArmBench`).

Training is the real loop, in this process: a `unilab.train.Runner` (worker process, ring
buffer, learner) on the preset configs/<task>/ppo.yaml. A hook keeps a copy of the
policy at every checkpoint the run writes, with the time it was written in seconds since
the bench started building the run, so start-up counts against the time (the Python and
torch imports before that do not). After training each copy is rolled out
deterministically on fresh envs (fixed seed) for one full episode. Success is the task's
own `success` metric at the episode's last step; every other task metric at that step is
reported as its mean over the envs.

Writes JSON (time and env steps to the target, every evaluation, the training curve from
metrics.jsonl, machine and load) and a PNG of success against wall time next to it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.algos.build import make_task_and_policy
from unilab.bench.common import machine_info, print_table, write_json
from unilab.config.compose import compose
from unilab.config.schema import Config
from unilab.runtime.rollout import StepInfo, rollout
from unilab.train import Runner, TrainHook
from unilab.utils.metrics import read_metrics


@dataclass(frozen=True)
class ArmBench:
    """One bench: which task, what counts as passing, how success reads in the plot."""

    name: str
    """The bench's name (`unilab bench <name>`, bench/results/<name>.json)."""
    task: str
    target_success: float
    target_minutes: float
    success_label: str
    """What a successful episode is, for the plot's legend."""

    @property
    def default_out(self) -> str:
        return f"bench/results/{self.name}.json"


@dataclass
class Snapshot:
    iteration: int
    env_steps: int
    seen_s: float
    """Seconds from the bench's start to the checkpoint's write."""
    weights: dict[str, torch.Tensor]
    """The policy's state dict at that checkpoint (CPU copies)."""


class CheckpointSnapshots(TrainHook):
    """Keeps the policy of every checkpoint (the run itself keeps only its newest three)."""

    name = "snapshots"

    def __init__(self, started: float) -> None:
        self.started = started
        self.snapshots: dict[int, Snapshot] = {}

    def on_checkpoint(self, runner: Runner, path: Path) -> None:
        if runner.iteration in self.snapshots:  # the final checkpoint may repeat the last one
            return
        weights = {k: v.detach().to("cpu").clone() for k, v in runner.policy.state_dict().items()}
        self.snapshots[runner.iteration] = Snapshot(
            runner.iteration, runner.env_steps, time.perf_counter() - self.started, weights
        )


def train_tokens(task: str, out_dir: str, overrides: list[str]) -> list[str]:
    """The run's config tokens; the preset configs/<task>/ppo.yaml supplies the rest."""
    return [
        f"task={task}",
        f"run.out_dir={out_dir}",
        "run.quiet=true",
        "run.export=false",
        "logging.tensorboard=false",
        *overrides,
    ]


def run_training(tokens: list[str], started: float) -> tuple[Config, Path, list[Snapshot], float]:
    """Train in this process; returns the config, the run directory, the snapshots (oldest
    first) and the wall time from `started` to the end of training."""
    cfg = compose(tokens)
    snapshots = CheckpointSnapshots(started)
    result = Runner(cfg, [snapshots]).learn()
    if result.exit_code:
        raise SystemExit(result.exit_code)
    wall = time.perf_counter() - started
    return cfg, result.run.path, [snapshots.snapshots[k] for k in sorted(snapshots.snapshots)], wall


def evaluate(cfg: Config, snapshot: Snapshot, num_envs: int, seed: int) -> dict[str, Any]:
    """One deterministic episode on num_envs fresh envs; success and each task metric (mean
    over the envs) at its end."""
    task, policy = make_task_and_policy(cfg, num_envs, seed, weights=snapshot.weights)
    last: dict[str, np.ndarray] = {}

    def keep_last(info: StepInfo) -> None:
        last.update(info.result.extras)

    rollout(task, policy, steps=task.max_episode_steps, on_step=keep_last)
    task.close()
    return {
        "iteration": snapshot.iteration,
        "env_steps": snapshot.env_steps,
        "success": float(last["success"].mean()),
        "final_metrics": {k: float(v.mean()) for k, v in sorted(last.items()) if k != "success"},
    }


def training_curve(rows: list[dict[str, Any]], offset_s: float) -> list[dict[str, Any]]:
    """Per logged iteration: wall time since launch, env steps, mean return, and the
    training-time per-step success (stochastic actions, approach phase included)."""
    curve = []
    for row in rows:
        sps = row.get("train/steps_per_s")
        if not sps:
            continue
        curve.append(
            {
                "wall_s": offset_s + row["env_steps"] / sps,
                "env_steps": row["env_steps"],
                "mean_return": row.get("train/mean_return"),
                "step_success": row.get("task/success"),
            }
        )
    return curve


def startup_offset(rows: list[dict[str, Any]], evals: list[dict[str, Any]]) -> float:
    """Seconds between the bench's start and the loop's clock start: checkpoint write times against the
    loop's own elapsed time at the same env step (median over checkpoints)."""
    loop_wall = {
        r["env_steps"]: r["env_steps"] / r["train/steps_per_s"]
        for r in rows
        if r.get("train/steps_per_s")
    }
    gaps = [e["wall_s"] - loop_wall[e["env_steps"]] for e in evals if e["env_steps"] in loop_wall]
    return float(np.median(gaps)) if gaps else 0.0


def plot(
    bench: ArmBench,
    evals: list[dict[str, Any]],
    curve: list[dict[str, Any]],
    path: Path,
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, left = plt.subplots(figsize=(7, 4))
    left.plot(
        [e["wall_s"] / 60 for e in evals],
        [e["success"] for e in evals],
        "o-",
        color="tab:green",
        label=f"eval: {bench.success_label}",
    )
    step_success = [
        (p["wall_s"] / 60, p["step_success"]) for p in curve if p["step_success"] is not None
    ]
    if step_success:
        xs, ys = zip(*step_success, strict=True)
        left.plot(xs, ys, color="tab:gray", linewidth=0.8, label="training: steps in success")
    left.axhline(bench.target_success, color="tab:green", linestyle=":", linewidth=1)
    left.axvline(bench.target_minutes, color="tab:red", linestyle=":", linewidth=1)
    left.set_xlabel("wall time since the run started building (min)")
    left.set_ylabel("success")
    left.set_ylim(-0.02, 1.02)
    left.legend(loc="lower right", fontsize=8)
    right = left.twinx()
    returns = [(p["wall_s"] / 60, p["mean_return"]) for p in curve if p["mean_return"] is not None]
    if returns:
        xs, ys = zip(*returns, strict=True)
        right.plot(xs, ys, color="tab:blue", linewidth=0.8, alpha=0.6)
    right.set_ylabel("mean episode return", color="tab:blue")
    left.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def ratios(doc: dict[str, Any]) -> tuple[dict[str, float | None], dict[str, float]]:
    """`final_success` and `time_budget_over_time_to_target` (the target minutes over the
    wall time to the target success; >= 1 passes, None when never reached), with targets."""
    target = doc["target"]
    took = doc.get("time_to_target_s")
    values = {
        "final_success": float(doc["final_success"]),
        "time_budget_over_time_to_target": target["minutes_max"] * 60 / took if took else None,
    }
    return values, {"final_success": target["success_min"], "time_budget_over_time_to_target": 1.0}


def run_bench(bench: ArmBench, argv: list[str] | None, description: str) -> int:
    """Parse argv, train, evaluate every checkpoint, write JSON and PNG; the exit code."""
    parser = argparse.ArgumentParser(prog=f"unilab bench {bench.name}", description=description)
    parser.add_argument("--eval-envs", type=int, default=128, help="envs per evaluation")
    parser.add_argument("--seed", type=int, default=12345, help="evaluation seed")
    parser.add_argument(
        "--out", default=bench.default_out, help=f"JSON output (default {bench.default_out})"
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. sim.num_envs=128")
    args = parser.parse_args(argv)
    if args.eval_envs < 1:
        parser.error("--eval-envs must be >= 1")
    torch.set_num_threads(1)
    started = time.perf_counter()
    machine = machine_info()

    out_dir = Path(tempfile.mkdtemp(prefix=f"{bench.name}_"))
    tokens = train_tokens(bench.task, str(out_dir), list(args.overrides))
    cfg, run_path, seen, train_wall = run_training(tokens, started)
    if not seen:
        print(f"no checkpoint was written under {out_dir}", file=sys.stderr)
        return 1

    evals = []
    for snap in seen:
        result = evaluate(cfg, snap, args.eval_envs, args.seed)
        evals.append({"wall_s": snap.seen_s, **result})
        print(
            f"iteration {result['iteration']:5d}  {result['env_steps']:>10,} steps  "
            f"{snap.seen_s:6.0f} s  success {result['success']:.3f}",
            flush=True,
        )
    rows = read_metrics(run_path / "metrics.jsonl")
    curve = training_curve(rows, startup_offset(rows, evals))
    reached = next((e for e in evals if e["success"] >= bench.target_success), None)
    final = evals[-1]
    last = rows[-1] if rows else {}
    summary_file = run_path / "summary.txt"
    doc = {
        "benchmark": bench.name,
        "task": bench.task,
        "command": "Runner(compose(" + repr(tokens) + ")).learn() in-process",
        "bench_command": f"unilab bench {bench.name} " + " ".join(argv or sys.argv[1:]),
        "machine": machine,
        "run_dir": str(run_path),
        "config": {
            "num_envs": cfg.sim.num_envs,
            "chunk_len": cfg.runtime.chunk_len,
            "mode": cfg.runtime.mode,
            "num_workers": cfg.runtime.num_workers,
            "total_env_steps": cfg.run.total_env_steps,
            "actor_hidden": list(cfg.algo.actor_hidden),
            "critic_hidden": list(cfg.algo.critic_hidden),
            "episode_length_s": cfg.task.episode_length_s,
        },
        "target": {"success_min": bench.target_success, "minutes_max": bench.target_minutes},
        "time_to_target_s": reached["wall_s"] if reached else None,
        "env_steps_to_target": reached["env_steps"] if reached else None,
        "passed": bool(reached and reached["wall_s"] <= bench.target_minutes * 60),
        "final_success": final["success"],
        "final_metrics": final["final_metrics"],
        "env_steps": last.get("env_steps"),
        "env_steps_per_s": last.get("train/steps_per_s"),
        "train_command_wall_s": train_wall,
        "evaluation": {"num_envs": args.eval_envs, "seed": args.seed, "deterministic": True},
        "evaluations": evals,
        "curve": curve,
        "summary": summary_file.read_text() if summary_file.is_file() else "",
        "bench_wall_s": time.perf_counter() - started,
    }
    doc["ratios"], doc["targets"] = ratios(doc)
    out = write_json(args.out, doc)
    title = f"{bench.task}: {cfg.sim.num_envs} envs, PPO, {cfg.runtime.mode}"
    plot(bench, evals, curve, out.with_suffix(".png"), title)
    pct = f"{bench.target_success:.0%}".replace("%", " %")
    row = {
        "env steps": doc["env_steps"],
        "steps/s": doc["env_steps_per_s"],
        f"to {pct} (s)": doc["time_to_target_s"],
        f"steps to {pct}": doc["env_steps_to_target"],
        "final success": doc["final_success"],
        "passed": doc["passed"],
    }
    print_table([row], list(row))
    print(f"wrote {out} and {out.with_suffix('.png')}")  # the run directory stays
    return 0
