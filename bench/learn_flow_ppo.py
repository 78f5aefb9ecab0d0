"""`unilab bench learn_flow_ppo`: RL fine-tuning of a flow VLA with and without exploration
tokens, from the same imitation checkpoint, measured as evaluated success per env step.

    unilab bench learn_flow_ppo --init RUN --task arm_around_obstacle --seeds 0,1,2 \\
        --arms tokens,null --steps 150000 --jobs 2 [key=value ...]
    unilab bench learn_flow_ppo --runs tokens=DIR,DIR null=DIR,DIR   # aggregate runs only

Each (arm, seed) is one `unilab train algo=flow_ppo algo.init=RUN` (the real runtime: a sim
worker, the ring, the learner), `algo.use_tokens=true` for `tokens`, `false` for `null`,
with the overrides given and `eval.every` iterations of in-sim evaluation (deterministic
chunks, `eval.episodes` episodes). The start success is the first evaluation (taken before
the actor's first update: `algo.critic_warmup` >= `eval.every`). The imitation reference
of a seed is the `null` arm's start: the bc_flow checkpoint as it deploys (null token),
evaluated on the same episodes; the `tokens` arm's start already has the selector's choice
in it. Reported per run: start, best and final success, and the env steps at which it
first reached its start + 10 points and the reference + 10 points; per arm: the means, and
how many seeds end with tokens above null. `--init` takes one run, or one per seed. Writes JSON (`rows`, `ratios`) and a PNG of the curves, by default
`bench/results/learn_flow_ppo_<task>.{json,png}`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from unilab.bench.common import machine_info, print_table, run_seed, write_json

GAIN = 0.10
"""The target the issue names: the imitation success plus 10 points."""


def curve(run: Path) -> list[tuple[int, float]]:
    """(env steps, evaluated success) rows of a run's metrics."""
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("eval/success_rate") is not None:
            out.append((int(row["env_steps"]), float(row["eval/success_rate"])))
    return out


def summarize(arm: str, seed: int | None, run: Path) -> dict[str, Any]:
    points = curve(run)
    if not points:
        return {"arm": arm, "seed": seed, "run": str(run), "evaluations": 0}
    start = points[0][1]
    reached = next((s for s, v in points[1:] if v >= start + GAIN - 1e-9), None)
    return {
        "arm": arm,
        "seed": seed,
        "run": str(run),
        "evaluations": len(points),
        "start_success": start,
        "best_success": max(v for _, v in points),
        "final_success": points[-1][1],
        "final_env_steps": points[-1][0],
        "env_steps_to_start_plus_10": reached,
        "curve": points,
    }


def add_reference(rows: list[dict[str, Any]]) -> None:
    """Each row gains `bc_success` (its seed's null-arm start) and the env steps at which
    it first reached that + 10 points (None: not within its budget)."""
    reference = {
        r["seed"]: r["start_success"] for r in rows if r["arm"] == "null" and r.get("evaluations")
    }
    for row in rows:
        bc = reference.get(row["seed"])
        if bc is None or not row.get("curve"):
            continue
        row["bc_success"] = bc
        row["env_steps_to_bc_plus_10"] = next(
            (s for s, v in row["curve"] if v >= bc + GAIN - 1e-9), None
        )


def train_one(init: str, task: str, arm: str, seed: int, steps: int, out: Path, extra: list[str]):
    cmd = [
        sys.executable, "-m", "unilab.cli", "train", f"task={task}", "algo=flow_ppo",
        f"algo.init={init}", f"algo.use_tokens={'true' if arm == 'tokens' else 'false'}",
        f"run.total_env_steps={steps}", f"run.seed={seed}", f"run.out_dir={out}",
        "run.play_episodes=0", "--quiet", *extra,
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    (run,) = list((out / task / "flow_ppo").iterdir())
    return run


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colours = {"tokens": "tab:blue", "null": "tab:orange"}
    seeds = sorted({row["seed"] for row in rows})  # one line style per seed
    seen: dict[tuple[str, int], int] = {}
    for row in rows:
        if not row.get("curve"):
            continue
        steps, success = zip(*row["curve"], strict=True)
        # Runs of the same arm and seed (settings compared with --runs) get their own
        # style and a number, in the order given.
        again = seen[row["arm"], row["seed"]] = seen.get((row["arm"], row["seed"]), 0) + 1
        style = ("-", "--", ":", "-.")[(seeds.index(row["seed"]) + again - 1) % 4]
        label = f"{row['arm']} seed {row['seed']}" + (f" (run {again})" if again > 1 else "")
        ax.plot(steps, success, style, marker="o", color=colours.get(row["arm"], "k"),
                alpha=0.8, label=label)  # fmt: skip
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluated success")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="unilab bench learn_flow_ppo", description=__doc__)
    p.add_argument(
        "--init",
        help="the bc_flow run (trained with algo.tokens=K) to start from; or one per seed, "
        "comma-separated in the order of --seeds",
    )
    p.add_argument("--task", default="arm_around_obstacle")
    p.add_argument("--arms", default="tokens,null")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=150_000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--work", default="", help="where the runs go (default: a temp folder)")
    p.add_argument("--runs", nargs="*", default=[], help="ARM=DIR,DIR: aggregate these runs")
    p.add_argument("--out", default="")
    p.add_argument(
        "--note", action="append", default=[], help="a line for the JSON's `notes` (repeatable)"
    )
    p.add_argument("rest", nargs="*", help="key=value overrides for every run")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    if args.runs:
        for spec in args.runs:
            arm, _, dirs = spec.partition("=")
            for i, d in enumerate(filter(None, dirs.split(","))):
                rows.append(summarize(arm, run_seed(Path(d), default=i), Path(d)))
    else:
        if not args.init:
            p.error("--init RUN is needed to train (or --runs to aggregate existing runs)")
        import tempfile

        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        inits = [i for i in args.init.split(",") if i.strip()]
        if len(inits) not in (1, len(seeds)):
            p.error(f"--init: {len(inits)} runs for {len(seeds)} seeds; give one, or one per seed")
        init_of = {seed: inits[min(i, len(inits) - 1)] for i, seed in enumerate(seeds)}

        work = Path(args.work or tempfile.mkdtemp(prefix="learn_flow_ppo_"))
        jobs = [(arm, seed) for seed in seeds for arm in args.arms.split(",") if arm.strip()]

        def run(job: tuple[str, int]) -> dict[str, Any]:
            arm, seed = job
            out = work / f"{arm}_{seed}"
            return summarize(
                arm,
                seed,
                train_one(init_of[seed], args.task, arm, seed, args.steps, out, args.rest),
            )

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            rows = list(pool.map(run, jobs))
    add_reference(rows)
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_arm.setdefault(row["arm"], []).append(row)
    ratios: dict[str, float] = {}
    for arm, items in by_arm.items():
        done = [r for r in items if r.get("evaluations")]
        if done:
            ratios[f"{arm}_final_minus_start"] = float(
                np.mean([r["final_success"] - r["start_success"] for r in done])
            )
            ratios[f"{arm}_best_minus_start"] = float(
                np.mean([r["best_success"] - r["start_success"] for r in done])
            )
            ratios[f"{arm}_final_mean"] = float(np.mean([r["final_success"] for r in done]))
            refs = [r for r in done if "bc_success" in r]
            if refs:
                ratios[f"{arm}_final_minus_bc"] = float(
                    np.mean([r["final_success"] - r["bc_success"] for r in refs])
                )
                ratios[f"{arm}_seeds_reaching_bc_plus_10"] = sum(
                    r["env_steps_to_bc_plus_10"] is not None for r in refs
                )
    final = {(r["arm"], r["seed"]): r["final_success"] for r in rows if r.get("evaluations")}
    paired = [s for (arm, s) in final if arm == "tokens" and ("null", s) in final]
    if paired:
        gaps = [final[("tokens", s)] - final[("null", s)] for s in paired]
        ratios["tokens_minus_null_final"] = float(np.mean(gaps))
        ratios["seeds_tokens_above_null"] = sum(g > 0 for g in gaps)
        ratios["seeds_paired"] = len(paired)
    task = args.task
    out = Path(args.out or f"bench/results/learn_flow_ppo_{task}.json")
    table = [{k: v for k, v in r.items() if k not in ("curve", "run")} for r in rows]
    print_table(table, ["arm", "seed", "start_success", "best_success", "final_success",
                        "final_env_steps", "env_steps_to_start_plus_10", "bc_success",
                        "env_steps_to_bc_plus_10"])  # fmt: skip
    doc = {
        "benchmark": "learn_flow_ppo",
        "bench_command": "unilab bench learn_flow_ppo " + " ".join(argv or sys.argv[1:]),
        "task": task,
        "init": args.init,
        "machine": machine_info(),
        "rows": table,
        "curves": {f"{r['arm']}_{r['seed']}": r.get("curve", []) for r in rows},
        "ratios": ratios,
        "bench_wall_s": time.perf_counter() - t0,
    }
    if args.note:
        doc["notes"] = list(args.note)
    write_json(out, doc)
    plot(rows, out.with_suffix(".png"), f"flow_ppo on {task}: with vs without tokens")
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
