"""`unilab bench learn_vla`: imitation of a tabletop task from expert demonstrations, measured
as in-simulation success.

    unilab bench learn_vla --task arm_move_side --algo bc_flow --episodes 200 --budget-s 1800 \\
        --eval-episodes 100 --seeds 0,1,2 --jobs 2 [--store demos.zarr] [key=value ...]

1. The store: `--store PATH` (e.g. written by `unilab collect`), else `--episodes` solved
   episodes of the task's scripted expert are collected into a temporary store by
   `unilab.data.collect.collect` (what `unilab collect` runs), with perturbation bursts of
   std `--action-noise` executed and the clean actions recorded (DART; 0: clean
   demonstrations), with the task config the overrides give (cameras, size).
2. For each training seed, `unilab train` (the real Runner and its offline loop,
   `unilab.workflows.train`) on the task's preset plus the overrides, for `--budget-s`
   seconds of wall time (`run.max_wall_s`) or `algo.steps`, whichever ends first. A hook
   keeps a copy of the EMA policy at every checkpoint with the time since training started.
   `--jobs N` trains N seeds at once, each in its own process with one torch thread (on a
   2-core box, 2 jobs each get one core: the budget then holds on half the machine).
   With `--jobs 1` torch keeps its default threads (both cores). Two such benches side by
   side oversubscribe the cores: 56-59 samples/s each (stop 44) against 212-215 for
   `--jobs 2` alone. Two benches can share the box when each runs on one thread
   (`OMP_NUM_THREADS=1 ... --jobs 1 runtime.learner_threads=1`): 207 samples/s each (stop 45).
3. Each kept policy is evaluated on `--curve-episodes` fresh episodes (one per env, chunked
   execution, noise seeded) for the curve: the same scenes at every point, so the points
   compare with each other but a small set is not the task's level (16 scenes of
   arm_move_side at seed 12345 are easy: 0.38 for a policy that solves 0.20 of 100); the
   final one on `--eval-episodes` episodes,
   beside the zero-action baseline on the same episodes (a cube can end up on its side by
   accident).

`--append --store STORE` adds seeds to an earlier JSON of the same bench (same store, task,
algo, training settings and evaluation, checked; a seed already there is replaced), so a
3-seed row can be made one or two 30-minute seeds at a time.

Writes JSON (store, settings, per seed: steps, samples/s, held-out loss, the success curve,
final success; `ratios`: mean/min final success and its gap over the baseline) and a PNG of
success against training wall time; by default to
`bench/results/learn_vla_<task>_<algo>.{json,png}`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
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
from unilab.deploy.policy_source import ConstantBaseline
from unilab.runtime.rollout import rollout
from unilab.train import Runner, TrainHook
from unilab.utils.metrics import read_metrics
from unilab.workflows.train import train

RESULTS = Path("bench/results")
TARGET_SUCCESS = 0.8


@dataclass
class Snapshot:
    step: int
    seen_s: float
    """Seconds from the start of training to this checkpoint."""
    weights: dict[str, torch.Tensor]


class CheckpointSnapshots(TrainHook):
    """A CPU copy of the EMA policy at every checkpoint (the run keeps only three)."""

    name = "snapshots"

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.snapshots: dict[int, Snapshot] = {}

    def on_start(self, runner: Runner) -> None:
        self.started = time.perf_counter()

    def on_checkpoint(self, runner: Runner, path: Path) -> None:
        weights = {k: v.detach().cpu().clone() for k, v in runner.policy.state_dict().items()}
        seen = time.perf_counter() - self.started
        self.snapshots[runner.iteration] = Snapshot(runner.iteration, seen, weights)


def success(
    cfg: Config, weights: dict[str, torch.Tensor] | None, episodes: int, seed: int
) -> float:
    """Fraction of `episodes` fresh episodes (one per env) the policy solves; weights None:
    the zero-action baseline."""
    task, policy = make_task_and_policy(cfg, episodes, seed, weights=weights)
    chosen: Any = policy
    if weights is None:
        from unilab.export.run_policy import policy_metadata

        chosen = ConstantBaseline(policy_metadata(task, cfg, {}, None), random=False)
    result = rollout(
        task,
        chosen,
        episodes=episodes,
        one_per_env=True,
        steps=task.max_episode_steps + 1,
        noise_seed=seed,
    )
    rate = result.success_rate()
    return float(rate) if rate is not None else float("nan")


def plot(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, left = plt.subplots(figsize=(7, 4))
    right = left.twinx()
    for run in runs:
        curve = run["curve"]
        left.plot(
            [c["wall_s"] / 60 for c in curve],
            [c["success"] for c in curve],
            "o-",
            label=f"seed {run['seed']}: success",
        )
        val = [(r["wall_s"] / 60, r["val_loss"]) for r in run["validation"]]
        if val:
            xs, ys = zip(*val, strict=True)
            right.plot(xs, ys, linestyle=":", linewidth=1, color="tab:gray")
    left.axhline(TARGET_SUCCESS, color="tab:green", linestyle=":", linewidth=1)
    left.set_xlabel("training wall time (min)")
    left.set_ylabel("success (fresh episodes)")
    left.set_ylim(-0.02, 1.02)
    right.set_ylabel("held-out loss (dotted)", color="tab:gray")
    left.legend(loc="upper left", fontsize=8)
    left.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def train_and_evaluate(job: dict[str, Any]) -> dict[str, Any]:
    """One training seed: train, evaluate the snapshots (curve) and the final policy."""
    if job["threads"]:
        torch.set_num_threads(job["threads"])
    seed = job["seed"]
    cfg = compose(job["tokens"])
    snaps = CheckpointSnapshots()
    t0 = time.perf_counter()
    run_dir = train(cfg, [snaps])
    assert run_dir is not None  # one process: this is rank 0
    train_wall = time.perf_counter() - t0
    kept = [snaps.snapshots[k] for k in sorted(snaps.snapshots)]
    curve = []
    for snap in kept[:-1]:
        rate = success(cfg, snap.weights, job["curve_episodes"], job["eval_seed"])
        curve.append({"step": snap.step, "wall_s": snap.seen_s, "success": rate})
        print(
            f"seed {seed} step {snap.step:6d} {snap.seen_s:6.0f} s success {rate:.2f}", flush=True
        )
    final = kept[-1]
    t_eval = time.perf_counter()
    final_rate = success(cfg, final.weights, job["eval_episodes"], job["eval_seed"])
    eval_s = time.perf_counter() - t_eval
    baseline = success(cfg, None, job["eval_episodes"], job["eval_seed"])
    curve.append({"step": final.step, "wall_s": final.seen_s, "success": final_rate})
    print(f"seed {seed} final step {final.step} success {final_rate:.3f} (zero {baseline:.3f})")
    rows = read_metrics(run_dir.metrics)
    wall_of = {r["step"]: r["train/wall_s"] for r in rows if "train/wall_s" in r}
    validation = [
        {
            "step": r["step"],
            "wall_s": wall_of.get(r["step"], final.seen_s),
            "val_loss": r["val/loss"],
        }
        for r in rows
        if "val/loss" in r
    ]
    return {
        "seed": seed,
        "run_dir": str(run_dir.path),
        "train_wall_s": train_wall,
        "steps": final.step,
        "summary": (run_dir.path / "summary.json").read_text(),
        "curve": curve,
        "validation": validation,
        "final_success": final_rate,
        "zero_action_success": baseline,
        "final_eval_s": eval_s,
    }


def run_jobs(jobs: list[dict[str, Any]], parallel: int) -> list[dict[str, Any]]:
    """Each job in this process (parallel 1) or in `parallel` spawned processes at once."""
    if parallel <= 1:
        return [train_and_evaluate(job) for job in jobs]
    with mp.get_context("spawn").Pool(parallel, maxtasksperchild=1) as pool:
        return pool.map(train_and_evaluate, jobs, chunksize=1)


_PER_SEED = ("run.seed=", "run.out_dir=", "runtime.learner_threads=", "data.store=")


def earlier_runs(
    path: Path, args: argparse.Namespace, store: str, tokens: list[str], evaluation: dict
) -> dict[str, Any]:
    """The JSON at `path` that `--append` adds to, after checking it measured the same
    thing (store, task, algo, training tokens but the seed, evaluation); SystemExit naming
    the first difference otherwise."""
    doc = json.loads(path.read_text())

    def shared(items: list[str]) -> list[str]:
        return [t for t in items if not t.startswith(_PER_SEED)]

    checks = [
        ("benchmark", doc.get("benchmark"), "learn_vla"),
        ("task", doc.get("task"), args.task),
        ("algo", doc.get("algo"), args.algo),
        ("store", doc.get("store"), store),
        ("training settings", shared(doc.get("train_tokens", [])), shared(tokens)),
        ("evaluation", doc.get("evaluation"), evaluation),
    ]
    for name, before, now in checks:
        if before != now:
            raise SystemExit(
                f"--append: {path} has another {name} ({before!r}; this run: {now!r}); "
                "append only runs of the same bench, or write a new --out"
            )
    return doc


def collect_store(store: Path, task: str, episodes: int, noise: float, overrides: list[str]):
    from unilab.data.collect import collect

    cfg = compose([f"task={task}", *overrides])
    result = collect(store, cfg.task, episodes, sim=cfg.sim, action_noise=noise, quiet=True)
    doc = result.to_dict()
    doc.update(
        episodes=result.existing + result.kept,
        expert_success=result.success_rate,
        action_noise=noise,
        image_size=getattr(cfg.task, "image_size", None),
    )
    for bulky in ("episode_ids", "rss"):
        doc.pop(bulky, None)
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench learn_vla", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--task", default="arm_move_side")
    parser.add_argument("--algo", default="bc_flow", choices=["bc_flow", "bc_mse"])
    parser.add_argument("--store", help="episode store to train from (default: collect one)")
    parser.add_argument("--episodes", type=int, default=200, help="expert episodes to collect")
    parser.add_argument(
        "--action-noise",
        type=float,
        default=1.0,
        help="std of the perturbation bursts while collecting (0: clean demonstrations)",
    )
    parser.add_argument("--budget-s", type=float, default=1800.0, help="training wall time")
    parser.add_argument("--eval-episodes", type=int, default=100, help="final episodes per seed")
    parser.add_argument("--curve-episodes", type=int, default=32, help="episodes per curve point")
    parser.add_argument("--seeds", default="0", help="training seeds, e.g. 0,1,2")
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once (processes)")
    parser.add_argument("--eval-seed", type=int, default=12345, help="seed of the eval episodes")
    parser.add_argument("--out", help="JSON output (default bench/results/learn_vla_<task>_<algo>)")
    parser.add_argument(
        "--append",
        action="store_true",
        help="add these seeds to the --out JSON of an earlier run of this bench with the same "
        "--store, task, algo, budget, evaluation and overrides (a seed already there is "
        "replaced): a 30-minute seed at a time",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. task.image_size=48")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not seeds or min(args.episodes, args.eval_episodes, args.curve_episodes, args.jobs) < 1:
        parser.error("need seeds, positive episode counts and --jobs >= 1")
    out_path = args.out or str(RESULTS / f"learn_vla_{args.task}_{args.algo}.json")
    if args.append and not (args.store and Path(out_path).is_file()):
        parser.error("--append needs --store (the earlier run's store) and an existing --out")
    machine = machine_info()
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="learn_vla_"))
    task_overrides = [o for o in args.overrides if o.startswith(("task.", "sim."))]
    if args.store:
        store, collected = Path(args.store), None
    else:
        store = work / f"{args.task}.zarr"
        collected = collect_store(
            store, args.task, args.episodes, args.action_noise, task_overrides
        )
        print(
            f"collected {collected['episodes']} expert episodes ({collected['frames']} frames, "
            f"action_noise {args.action_noise}) in {collected['seconds']:.0f} s",
            flush=True,
        )
    parallel = min(args.jobs, len(seeds))
    jobs = []
    for seed in seeds:
        tokens = [
            f"task={args.task}",
            f"algo={args.algo}",
            f"data.store={store}",
            f"run.max_wall_s={args.budget_s}",
            f"run.out_dir={work / 'runs'}",
            f"run.seed={seed}",
            "run.play_episodes=0",
            "run.quiet=true",
            "eval.every=0",
            *(["runtime.learner_threads=1"] if parallel > 1 else []),
            *args.overrides,
        ]
        jobs.append(
            {
                "seed": seed,
                "tokens": tokens,
                "threads": 1 if parallel > 1 else 0,
                "curve_episodes": args.curve_episodes,
                "eval_episodes": args.eval_episodes,
                "eval_seed": args.eval_seed,
            }
        )
    cfg = compose(jobs[-1]["tokens"])
    cfg_doc = {
        "cameras": list(getattr(cfg.task, "cameras", [])),
        "image_size": getattr(cfg.task, "image_size", None),
        "proprio": list(getattr(cfg.task, "proprio", [])),
        "model": {
            k: getattr(cfg.algo.model, k)
            for k in ("horizon", "num_steps", "n_act", "width", "prefix_layers", "expert_layers")
        },
        "image_channels": list(cfg.algo.model.image_channels),
        "batch_size": cfg.algo.batch_size,
        "steps": cfg.algo.steps,
        "lr": cfg.algo.lr,
        "checkpoint_every": cfg.run.checkpoint_every,
        "jobs": parallel,
        "torch_threads_per_job": 1 if parallel > 1 else torch.get_num_threads(),
    }
    evaluation = {
        "episodes": args.eval_episodes,
        "curve_episodes": args.curve_episodes,
        "seed": args.eval_seed,
        "protocol": "one fresh episode per env, chunked execution, noise from the seed",
    }
    earlier = (
        earlier_runs(Path(out_path), args, str(store), jobs[-1]["tokens"], evaluation)
        if args.append
        else None
    )
    if parallel > 1:
        os.environ.setdefault("MUJOCO_GL", "egl")  # the spawned children render
    runs = run_jobs(jobs, parallel)
    for run in runs:  # per run: appended seeds may have run with other --jobs
        run["jobs"] = parallel
        run["torch_threads"] = cfg_doc["torch_threads_per_job"]
    commands = ["unilab bench learn_vla " + " ".join(argv or sys.argv[1:])]
    if earlier is not None:
        runs = sorted(
            [r for r in earlier["runs"] if r["seed"] not in seeds] + runs, key=lambda r: r["seed"]
        )
        collected = earlier["collected"]
        commands = [*earlier.get("bench_commands", [earlier["bench_command"]]), *commands]
    finals = [r["final_success"] for r in runs]
    base = [r["zero_action_success"] for r in runs]
    doc = {
        "benchmark": "learn_vla",
        "task": args.task,
        "algo": args.algo,
        "bench_command": commands[-1],
        "bench_commands": commands,
        "train_tokens": jobs[-1]["tokens"],
        "machine": machine,
        "store": str(store),
        "collected": collected,
        "config": cfg_doc,
        "evaluation": evaluation,
        "runs": runs,
        "target": {"success_min": TARGET_SUCCESS},
        "ratios": {
            "final_success_mean": float(np.mean(finals)),
            "final_success_std": float(np.std(finals)),
            "final_success_min": float(np.min(finals)),
            "success_over_zero_action": float(np.mean(finals) - np.mean(base)),
        },
        "bench_wall_s": time.perf_counter() - started,
    }
    out = write_json(out_path, doc)
    plot(runs, out.with_suffix(".png"), f"{args.task}: {args.algo} from {store.name}")
    print_table(
        [
            {
                "seed": r["seed"],
                "steps": r["steps"],
                "train s": r["train_wall_s"],
                "success": r["final_success"],
                "zero": r["zero_action_success"],
            }
            for r in runs
        ],
        ["seed", "steps", "train s", "success", "zero"],
    )
    print(f"wrote {out} and {out.with_suffix('.png')} (runs under {work})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
