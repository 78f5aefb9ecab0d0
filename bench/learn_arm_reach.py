"""`python -m bench.learn_arm_reach`: train arm_reach with `unilab train` on its preset, then
measure, checkpoint by checkpoint, the fraction of episodes that end within 2 cm of the target.

Training is the real command (`unilab train task=arm_reach ...` in a child process: worker
process, ring buffer, learner). While it runs, this script copies every `ckpt_*.pt` the run
writes (the run keeps only its newest three) and notes when it appeared, in seconds since
the command was launched, so start-up counts against the time. After training it loads
each copy with `torch.load(weights_only=True)`, rebuilds the actor from the run's config and
rolls it out deterministically on fresh envs (fixed seed) for one full episode. Success is
the task's own `success` metric at the episode's last step: end effector within
`task.success_tolerance` (2 cm) of the target. The target: >= 95 % success in under 10 min.

Writes JSON (time and env steps to 95 %, every evaluation, the training curve from
metrics.jsonl, machine and load) and a PNG of success against wall time next to it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.bench.common import machine_info, print_table, write_json
from unilab.config.compose import config_from_yaml
from unilab.config.schema import Config
from unilab.policies.actor_critic import GaussianActor
from unilab.tasks.registry import make_task
from unilab.utils.metrics import read_metrics

TASK = "arm_reach"
TARGET_SUCCESS = 0.95
TARGET_MINUTES = 10.0
DEFAULT_OUT = "bench/results/learn_arm_reach.json"
POLL_S = 0.2


@dataclass
class SeenCheckpoint:
    path: Path
    """Our copy of the checkpoint."""
    seen_s: float
    """Seconds from launching the training command to the checkpoint's write (its mtime)."""


def train_command(out_dir: str, overrides: list[str]) -> list[str]:
    """`unilab train` arguments; the preset configs/arm_reach/ppo.yaml supplies the rest."""
    return [
        "train",
        f"task={TASK}",
        f"run.out_dir={out_dir}",
        "run.quiet=true",
        "run.export=false",
        "logging.tensorboard=false",
        *overrides,
    ]


def run_training(
    args: list[str], out_dir: Path, keep_dir: Path
) -> tuple[Path, list[SeenCheckpoint], float]:
    """Run `unilab train` in a child process, copying each checkpoint as it appears.

    Returns the run directory, the copies (oldest first) and the command's wall time.
    """
    code = "import sys; from unilab.cli import main; sys.exit(main())"
    launched = time.time()
    proc = subprocess.Popen([sys.executable, "-c", code, *args])
    seen: dict[str, SeenCheckpoint] = {}

    def collect() -> None:
        for ckpt in sorted(out_dir.glob(f"{TASK}/*/*/checkpoints/ckpt_*.pt")):
            if ckpt.name in seen:
                continue
            try:
                mtime = ckpt.stat().st_mtime
                copy = keep_dir / ckpt.name
                shutil.copy2(ckpt, copy)
            except FileNotFoundError:  # rotated away between listing and copying
                continue
            seen[ckpt.name] = SeenCheckpoint(copy, mtime - launched)

    while proc.poll() is None:
        collect()
        time.sleep(POLL_S)
    wall = time.time() - launched
    collect()
    if proc.returncode != 0:
        raise RuntimeError(f"unilab train exited with status {proc.returncode}")
    runs = sorted(out_dir.glob(f"{TASK}/*/*/metrics.jsonl"))
    if not runs:
        raise RuntimeError(f"no run directory with metrics.jsonl under {out_dir}")
    return runs[-1].parent, [seen[k] for k in sorted(seen)], wall


def load_actor(
    cfg: Config, obs_dim: int, action_dim: int, checkpoint: Path
) -> tuple[GaussianActor, dict[str, Any]]:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    actor = GaussianActor(
        obs_dim, action_dim, cfg.algo.actor_hidden, cfg.algo.activation, cfg.algo.init_std
    )
    actor.load_state_dict(state["algo"]["actor"])
    actor.eval()
    return actor, state


def evaluate(cfg: Config, checkpoint: Path, num_envs: int, seed: int) -> dict[str, Any]:
    """One deterministic episode on num_envs fresh envs; success and distance at its end."""
    task = make_task(cfg.task, num_envs=num_envs, seed=seed)
    actor, state = load_actor(cfg, task.obs_dims["policy"], task.action_dim, checkpoint)
    obs = task.reset()
    success = distance = np.zeros(num_envs)
    with torch.no_grad():
        for _ in range(task.max_episode_steps):
            result = task.step(actor(torch.from_numpy(obs["policy"])).numpy())
            success, distance = result.extras["success"], result.extras["distance"]
            obs = result.obs
    return {
        "iteration": int(state["iteration"]),
        "env_steps": int(state["env_steps"]),
        "success": float(success.mean()),
        "mean_final_distance_m": float(distance.mean()),
        "max_final_distance_m": float(distance.max()),
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
    """Seconds between launch and the loop's clock start: checkpoint write times against the
    loop's own elapsed time at the same env step (median over checkpoints)."""
    loop_wall = {
        r["env_steps"]: r["env_steps"] / r["train/steps_per_s"]
        for r in rows
        if r.get("train/steps_per_s")
    }
    gaps = [e["wall_s"] - loop_wall[e["env_steps"]] for e in evals if e["env_steps"] in loop_wall]
    return float(np.median(gaps)) if gaps else 0.0


def plot(evals: list[dict[str, Any]], curve: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, left = plt.subplots(figsize=(7, 4))
    left.plot(
        [e["wall_s"] / 60 for e in evals],
        [e["success"] for e in evals],
        "o-",
        color="tab:green",
        label="eval: episodes ending within 2 cm",
    )
    step_success = [
        (p["wall_s"] / 60, p["step_success"]) for p in curve if p["step_success"] is not None
    ]
    if step_success:
        xs, ys = zip(*step_success, strict=True)
        left.plot(xs, ys, color="tab:gray", linewidth=0.8, label="training: steps within 2 cm")
    left.axhline(TARGET_SUCCESS, color="tab:green", linestyle=":", linewidth=1)
    left.axvline(TARGET_MINUTES, color="tab:red", linestyle=":", linewidth=1)
    left.set_xlabel("wall time since `unilab train` started (min)")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.learn_arm_reach", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--eval-envs", type=int, default=128, help="envs per evaluation")
    parser.add_argument("--seed", type=int, default=12345, help="evaluation seed")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. sim.num_envs=128")
    args = parser.parse_args(argv)
    if args.eval_envs < 1:
        parser.error("--eval-envs must be >= 1")
    torch.set_num_threads(1)
    started = time.time()
    machine = machine_info()

    out_dir = Path(tempfile.mkdtemp(prefix="learn_arm_reach_"))
    keep_dir = out_dir / "seen_checkpoints"
    keep_dir.mkdir()
    command = train_command(str(out_dir), list(args.overrides))
    run_path, seen, train_wall = run_training(command, out_dir, keep_dir)
    if not seen:
        print(f"no checkpoint was written under {out_dir}", file=sys.stderr)
        return 1
    cfg = config_from_yaml((run_path / "config.yaml").read_text())

    evals = []
    for ckpt in seen:
        result = evaluate(cfg, ckpt.path, args.eval_envs, args.seed)
        evals.append({"wall_s": ckpt.seen_s, **result})
        print(
            f"iteration {result['iteration']:5d}  {result['env_steps']:>10,} steps  "
            f"{ckpt.seen_s:6.0f} s  success {result['success']:.3f}",
            flush=True,
        )
    rows = read_metrics(run_path / "metrics.jsonl")
    curve = training_curve(rows, startup_offset(rows, evals))
    reached = next((e for e in evals if e["success"] >= TARGET_SUCCESS), None)
    final = evals[-1]
    last = rows[-1] if rows else {}
    summary_file = run_path / "summary.txt"
    doc = {
        "benchmark": "learn_arm_reach",
        "task": TASK,
        "command": "unilab " + " ".join(command),
        "bench_command": "python -m bench.learn_arm_reach " + " ".join(argv or sys.argv[1:]),
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
            "success_tolerance_m": cfg.task.success_tolerance,
        },
        "target": {"success_min": TARGET_SUCCESS, "minutes_max": TARGET_MINUTES},
        "time_to_target_s": reached["wall_s"] if reached else None,
        "env_steps_to_target": reached["env_steps"] if reached else None,
        "passed": bool(reached and reached["wall_s"] <= TARGET_MINUTES * 60),
        "final_success": final["success"],
        "final_mean_distance_m": final["mean_final_distance_m"],
        "env_steps": last.get("env_steps"),
        "env_steps_per_s": last.get("train/steps_per_s"),
        "train_command_wall_s": train_wall,
        "evaluation": {"num_envs": args.eval_envs, "seed": args.seed, "deterministic": True},
        "evaluations": evals,
        "curve": curve,
        "summary": summary_file.read_text() if summary_file.is_file() else "",
        "bench_wall_s": time.time() - started,
    }
    out = write_json(args.out, doc)
    plot(evals, curve, out.with_suffix(".png"), f"{TASK}: {cfg.sim.num_envs} envs, PPO, sync")
    print_table(
        [
            {
                "env steps": doc["env_steps"],
                "steps/s": doc["env_steps_per_s"],
                "to 95 % (s)": doc["time_to_target_s"],
                "steps to 95 %": doc["env_steps_to_target"],
                "final success": doc["final_success"],
                "passed": doc["passed"],
            }
        ],
        ["env steps", "steps/s", "to 95 % (s)", "steps to 95 %", "final success", "passed"],
    )
    print(f"wrote {out} and {out.with_suffix('.png')}")
    shutil.rmtree(keep_dir, ignore_errors=True)  # the run directory stays for inspection
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
