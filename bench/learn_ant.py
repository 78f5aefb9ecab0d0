"""`unilab bench learn_ant`: gymnasium's ant.xml through the `mjcf` task, PPO and SAC return
curves against wall time and env steps, each for a fixed wall-time budget on its preset.

`--runs DIR [DIR ...]` plots existing run directories instead of training.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from unilab.bench.common import machine_info, write_json
from unilab.config import compose
from unilab.train import train
from unilab.utils.metrics import read_metrics


def curve(run_dir: Path) -> dict[str, Any]:
    rows = [
        r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("train/mean_return") is not None
    ]
    return {
        "run": str(run_dir),
        "algo": run_dir.parent.name,
        "wall_s": [r["train/wall_s"] for r in rows],
        "env_steps": [r["env_steps"] for r in rows],
        "mean_return": [r["train/mean_return"] for r in rows],
    }


def plot(curves: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for c in curves:
        axes[0].plot(c["wall_s"], c["mean_return"], label=c["algo"])
        axes[1].plot(c["env_steps"], c["mean_return"], label=c["algo"])
    axes[0].set_xlabel("wall time (s)")
    axes[1].set_xlabel("env steps")
    for ax in axes:
        ax.set_ylabel("mean return (last 100 episodes)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("gymnasium ant.xml via the mjcf task (2 CPU cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench learn_ant", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=4.0, help="wall budget per algorithm")
    parser.add_argument("--quick", action="store_true", help="20 s per algorithm")
    parser.add_argument("--out", default="bench/results/learn_ant.json")
    parser.add_argument("--runs", nargs="*", help="plot these run directories instead")
    args = parser.parse_args(argv)
    budget = 20.0 if args.quick else 60.0 * args.minutes
    if args.runs:
        runs = [Path(r) for r in args.runs]
    else:
        tmp = Path(tempfile.mkdtemp(prefix="learn_ant_"))
        runs = []
        for algo in ("ppo", "sac"):
            cfg = compose(
                [
                    "task=mjcf",
                    f"algo={algo}",
                    f"run.max_wall_s={budget}",
                    f"run.out_dir={tmp}",
                    "run.quiet=true",
                    "run.export=false",
                ]
            )
            runs.append(train(cfg).path)
    curves = [curve(r) for r in runs]
    out = Path(args.out)
    png = out.with_suffix(".png")
    write_json(
        out,
        {"benchmark": "learn_ant", "machine": machine_info(), "budget_s": budget, "curves": curves},
    )
    plot(curves, png)
    for c in curves:
        last = c["mean_return"][-1] if c["mean_return"] else None
        print(
            f"{c['algo']}: {c['env_steps'][-1] if c['env_steps'] else 0:,} env steps, final mean return {last}"
        )
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
