"""`python -m bench.learn_allocation`: uniform against Thompson reset-bin allocation.

Trains a task with reset bins (default: arm_reach with its target box cut into 2 x 2 x 2
cells) on its preset, once per allocation mode and seed, with the same budget. Every
`--eval-every` iterations the policy is evaluated on fresh envs whose bins are drawn
uniformly (what the policy meets when deployed), so both modes are scored on the same
distribution; the training-batch success is not comparable (thompson changes it).

Reports per run: env steps and wall seconds to reach `--target` evaluation success (None
if never), the final evaluation success, each bin's posterior success at the end; and per
mode the mean over seeds. Writes JSON and a PNG of evaluation success against env steps.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from unilab.bench.common import machine_info, print_table, write_json
from unilab.config.compose import compose
from unilab.utils.metrics import read_metrics
from unilab.workflows.train import train

DEFAULT_OUT = "bench/results/learn_allocation.json"
BIN_KEYS = {
    "arm_reach": "task.target_bins",
    "arm_lift_cube": "task.cube_bins",
    "cartpole_balance": "task.init_angle_bins",
    "planar_reach": "task.target_bins",
}
"""The config key that cuts each task's starting conditions into reset bins."""


def run_one(
    args: argparse.Namespace, mode: str, seed: int, root: Path, arm: list[str]
) -> dict[str, Any]:
    """One training run of the arm named `mode`, made by the overrides `arm`."""
    cfg = compose(
        [
            f"task={args.task}",
            *arm,
            f"run.seed={seed}",
            f"run.total_env_steps={args.steps}",
            f"eval.every={args.eval_every}",
            f"eval.episodes={args.eval_episodes}",
            "logging.log_every=1",
            "logging.tensorboard=false",
            "run.quiet=true",
            "run.export=false",
            f"run.out_dir={root / f'{mode}_{seed}'}",
            *args.overrides,
        ]
    )
    run = train(cfg)
    assert run is not None  # one process: this is rank 0
    rows = read_metrics(run.path / "metrics.jsonl")
    evals = [
        (int(r["env_steps"]), float(r["train/wall_s"]), float(r["eval/success_rate"]))
        for r in rows
        if "eval/success_rate" in r
    ]
    reached = next(((s, w) for s, w, rate in evals if rate >= args.target), None)
    last = rows[-1]
    bins = sorted(int(k.split("_")[-1]) for k in last if k.startswith("alloc/success_"))
    return {
        "mode": mode,
        "seed": seed,
        "steps_to_target": reached[0] if reached else None,
        "wall_s_to_target": reached[1] if reached else None,
        "final_eval_success": evals[-1][2] if evals else None,
        "bin_success": [last[f"alloc/success_{k}"] for k in bins],
        "bin_prob": [last[f"alloc/prob_{k}"] for k in bins],
        "allocation_s_per_wall_s": float(last["runtime/allocation_s"] / last["train/wall_s"])
        if "runtime/allocation_s" in last
        else None,
        "curve": evals,
        # worker time outside physics and inference (ring writes, and forks when branching)
        "worker_write_s_per_sim_s": float(last["workers/write_s"] / last["workers/sim_s"])
        if last.get("workers/sim_s")
        else None,
        "wall_s": float(last["train/wall_s"]),
    }


def _to_target(run: dict[str, Any]) -> tuple[float, float]:
    """(env steps, wall s) to the target; a run that never reached it counts at its whole
    budget (its last evaluation's steps, its whole wall time): a lower bound."""
    if run["steps_to_target"] is not None:
        return float(run["steps_to_target"]), float(run["wall_s_to_target"])
    last_steps = float(run["curve"][-1][0]) if run["curve"] else 0.0
    return last_steps, float(run["wall_s"])


def summarize(runs: list[dict[str, Any]], modes: list[str]) -> list[dict[str, Any]]:
    """Per mode: seeds, how many reached the target, mean steps and wall seconds to it
    (unreached runs counted at their whole budget, so with reached < seeds the mean is a
    lower bound), and the mean final evaluation success."""
    table = []
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        hit = [r for r in mine if r["steps_to_target"] is not None]
        to_target = np.array([_to_target(r) for r in mine]).reshape(-1, 2)
        table.append(
            {
                "mode": mode,
                "seeds": len(mine),
                "reached": len(hit),
                "mean_steps_to_target": float(to_target[:, 0].mean()) if mine else None,
                "mean_wall_s_to_target": float(to_target[:, 1].mean()) if mine else None,
                "mean_final_success": float(np.mean([r["final_eval_success"] for r in mine])),
            }
        )
    return table


def paired(runs: list[dict[str, Any]], modes: list[str]) -> dict[str, int]:
    """Seeds on which the second mode reached the target in fewer env steps, and in less
    wall time, than the first (unreached runs counted at their whole budget)."""
    a = {r["seed"]: _to_target(r) for r in runs if r["mode"] == modes[0]}
    b = {r["seed"]: _to_target(r) for r in runs if r["mode"] == modes[1]}
    seeds = sorted(set(a) & set(b))
    return {
        "seeds_compared": len(seeds),
        f"seeds_{modes[1]}_fewer_steps": sum(b[s][0] < a[s][0] for s in seeds),
        f"seeds_{modes[1]}_less_wall": sum(b[s][1] < a[s][1] for s in seeds),
    }


def ratios(table: list[dict[str, Any]]) -> dict[str, float | None]:
    """`<b>_vs_<a>_steps_to_target` and `..._wall_to_target`: a's mean over b's (> 1: b
    reaches the target sooner), for the second mode against the first."""
    out: dict[str, float | None] = {}
    if len(table) < 2:
        return out
    a, b = table[0], table[1]
    for key, label in (("mean_steps_to_target", "steps"), ("mean_wall_s_to_target", "wall")):
        ok = a[key] is not None and b[key] is not None and b[key] > 0
        out[f"{b['mode']}_vs_{a['mode']}_{label}_to_target"] = a[key] / b[key] if ok else None
    return out


def plot(runs: list[dict[str, Any]], path: Path, target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colours = {
        "uniform": "tab:blue",
        "thompson": "tab:orange",
        "plain": "tab:blue",
        "branching": "tab:orange",
    }
    # Thin: each seed; thick: the mean over seeds where their evaluation steps coincide.
    for mode in dict.fromkeys(r["mode"] for r in runs):
        colour = colours.get(mode, "grey")
        mine = [r for r in runs if r["mode"] == mode]
        for r in mine:
            ax.plot(
                [c[0] for c in r["curve"]],
                [c[2] for c in r["curve"]],
                color=colour,
                lw=0.8,
                alpha=0.35,
            )
        steps = [c[0] for c in mine[0]["curve"]]
        if all([c[0] for c in r["curve"]] == steps for r in mine):
            mean = np.mean([[c[2] for c in r["curve"]] for r in mine], axis=0)
            ax.plot(steps, mean, color=colour, lw=2.2, label=f"{mode}: mean of {len(mine)} seeds")
    ax.axhline(target, color="black", lw=0.8, ls="--")
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval success (uniform bins)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.learn_allocation", description=__doc__)
    p.add_argument("--task", default="arm_reach")
    p.add_argument("--bins", default="[2,2,2]", help=f"reset bins, per task: {BIN_KEYS}")
    p.add_argument(
        "--bin-key",
        help="the config key that sets the bins, when not the task's usual one "
        "(e.g. task.init_cart_bins for cartpole_balance's cart-position bands)",
    )
    p.add_argument("--modes", default="uniform,thompson")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=600_000, help="env steps per run")
    p.add_argument("--target", type=float, default=0.9, help="evaluation success to reach")
    p.add_argument("--eval-every", type=int, default=40, help="learner iterations")
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--runs-dir", help="keep the run directories here (default: a temp dir)")
    p.add_argument(
        "--summarize",
        metavar="JSON",
        help="recompute the table, ratios and paired counts of a written result and exit",
    )
    p.add_argument("overrides", nargs="*", help="more key=value config overrides")
    args = p.parse_args(argv)
    if args.summarize:
        resummarize(Path(args.summarize))
        return 0
    modes = args.modes.split(",")
    if args.task not in BIN_KEYS and not args.bin_key:
        p.error(
            f"--task {args.task!r} has no reset bins here; one of {', '.join(BIN_KEYS)}, "
            "or name its bin key with --bin-key"
        )
    key = args.bin_key or BIN_KEYS[args.task]
    arms = {m: [f"{key}={args.bins}", f"runtime.allocation={m}"] for m in modes}
    compare_arms(args, arms, "bench.learn_allocation", argv, {"bins": args.bins})
    return 0


def resummarize(path: Path) -> None:
    """Rewrite a result's `rows`, `ratios` and `paired` from its `runs`."""
    import json

    result = json.loads(path.read_text())
    modes = list(result["arms"])
    table = summarize(result["runs"], modes)
    result.update(rows=table, ratios=ratios(table), paired=paired(result["runs"], modes))
    print_table(table, list(table[0]))
    plot(result["runs"], path.with_suffix(".png"), float(result["target"]))
    write_json(path, result)
    print(f"rewrote {path}")


@contextlib.contextmanager
def _kept(path: str) -> Iterator[str]:
    Path(path).mkdir(parents=True, exist_ok=True)
    yield path


def compare_arms(
    args: argparse.Namespace,
    arms: dict[str, list[str]],
    module: str,
    argv: list[str] | None,
    extra: dict[str, Any],
) -> None:
    """Train every arm (name -> overrides) on every seed, interleaved so drift in box load
    hits all arms alike; print the table, write JSON (`rows`, `ratios` of the second arm
    against the first) and the curves' PNG to `args.out`."""
    runs = []
    keep = getattr(args, "runs_dir", None)
    with tempfile.TemporaryDirectory() if keep is None else _kept(keep) as tmp:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for name, arm in arms.items():
                print(f"{name} seed {seed} ...", file=sys.stderr, flush=True)
                runs.append(run_one(args, name, seed, Path(tmp), arm=arm))
    table = summarize(runs, list(arms))
    print_table(table, list(table[0]))
    out = Path(args.out)
    png = out.with_suffix(".png")
    plot(runs, png, args.target)
    write_json(
        out,
        {
            "command": f"python -m {module} " + " ".join(argv or sys.argv[1:]),
            "task": args.task,
            "arms": arms,
            **extra,
            "steps": args.steps,
            "target": args.target,
            "rows": table,
            "ratios": ratios(table),
            "paired": paired(runs, list(arms)) if len(arms) > 1 else {},
            "runs": runs,
            "plot": str(png),
            "machine": machine_info(),
        },
    )
    print(f"wrote {out} and {png}")


if __name__ == "__main__":
    sys.exit(main())
