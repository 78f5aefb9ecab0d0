"""`unilab bench failure_alerts RUN [RUN ...]`: how well a VLA's failure alerts warn of
failed episodes, one run per seed, scored on simulated rollouts.

    unilab bench failure_alerts RUN [RUN ...] [--episodes 100] [--eval-seed 12345]
                                [--threshold 0.5] [--stall-s 5] [--note TEXT]

Each run (a bc_flow / awr_flow run with value heads) plays `--episodes` evaluation episodes
(`unilab.deploy.evaluate.evaluate` with live alerts, one episode per env) and is scored at
the live rules (`--threshold`, `--stall-s`: what `unilab eval --alerts` uses) and, replayed
from the same episodes' recorded predictions, at each rule alone over a sweep of
thresholds (`unilab eval --alerts --alert-sweep`). Precision is read against the failure
rate: an alert that fires on every episode has precision = failure rate, so `lift` =
precision / failure rate says how much an alert tells an operator beyond the base rate.
Lead time: seconds from an episode's first alert to its end, over alerted failures.

A second comparator: the clock (`clock_baseline`), an alert at t seconds on every episode
still running. Failed episodes tend to run to the time limit, so any late alert is right
more often than the failure rate; a rule of the heads is worth its keep where it beats the
clock at the same recall, or warns earlier.

Writes JSON (per run: success, failure rate, the live scores, the sweep, the clock
baseline; `ratios`: means over the runs) and a PNG (precision and recall against each
rule's threshold, a line per run, the failure rate dashed, the clock's precision wide), by default `bench/results/failure_alerts_<task>.{json,png}`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from unilab.bench.common import machine_info, print_table, run_seed, write_json


def _lift(precision: float | None, failure_rate: float) -> float | None:
    if precision is None or failure_rate <= 0:
        return None
    return precision / failure_rate


BASELINE_TIMES_S = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
"""The clock baseline's alert times (s)."""


def clock_baseline(
    lengths_s: list[float], failed: list[bool], times_s: tuple[float, ...] = BASELINE_TIMES_S
) -> list[dict[str, Any]]:
    """An alert that knows nothing but the clock: at t seconds, on every episode still
    running. Failures tend to run to the time limit, so a late alert of any kind is right
    more often than the failure rate; the heads' rules must beat this, not only the rate."""
    from unilab.deploy.failure_alerts import Alert, alert_quality
    from unilab.deploy.live_alerts import quality_fields

    outcomes = [not f for f in failed]
    rows = []
    for t in times_s:
        alerts = [Alert(e, 0, 0, t, "clock", 0.0) for e, end in enumerate(lengths_s) if end > t]
        q = alert_quality(alerts, outcomes, lengths_s)
        rows.append({"rule": "clock", "value": float(t), **quality_fields(q)})
    return rows


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def _plot(path: Path, runs: list[dict[str, Any]], task: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    rules = (
        ("low_success", "P(success) threshold"),
        ("progress_stall", "stall (s); clock: alert time (s)"),
    )
    for ax, (rule, label) in zip(axes, rules, strict=True):
        for i, run in enumerate(runs):
            rows = [r for r in run["sweep"] if r["rule"] == rule]
            x = [r["value"] for r in rows]
            prec = [np.nan if r["precision"] is None else r["precision"] for r in rows]
            rec = [np.nan if r["recall"] is None else r["recall"] for r in rows]
            colour = f"C{i}"
            ax.plot(x, prec, "-o", color=colour, label=f"precision, seed {run['seed']}")
            ax.plot(x, rec, ":s", color=colour, label=f"recall, seed {run['seed']}")
            ax.axhline(run["failure_rate"], color=colour, ls="--", lw=0.8)
            if rule == "progress_stall":
                clock = run["clock_baseline"]
                x = [r["value"] for r in clock]
                prec = [np.nan if r["precision"] is None else r["precision"] for r in clock]
                ax.plot(
                    x, prec, "-", color=colour, alpha=0.35, lw=3, label=f"clock, seed {run['seed']}"
                )
        ax.set_xlabel(label)
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{rule} alone (dashed: failure rate)")
    axes[1].set_title("progress_stall alone (wide: clock baseline precision)")
    axes[0].set_ylabel("precision / recall")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="center right")
    fig.suptitle(f"failure alerts, {task}")
    fig.tight_layout(rect=(0.0, 0.0, 0.84, 1.0))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    import torch

    from unilab.cli.play import load_target
    from unilab.deploy.evaluate import evaluate
    from unilab.deploy.live_alerts import (
        SWEEP_DEFAULT_STALL_S,
        SWEEP_DEFAULT_THRESHOLDS,
        AlertOptions,
        value_policy,
    )
    from unilab.deploy.sim_task import configs_for_policy
    from unilab.tasks.registry import TASKS

    p = argparse.ArgumentParser(prog="unilab bench failure_alerts", description=__doc__)
    p.add_argument("runs", nargs="+", type=Path, help="runs with value heads, one per seed")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--eval-seed", type=int, default=12345)
    p.add_argument("--threshold", type=float, default=0.5, help="live P(success) threshold")
    p.add_argument("--stall-s", type=float, default=5.0, help="live stall duration (s)")
    p.add_argument("--out", default="")
    p.add_argument("--note", action="append", default=[], help="a line for the JSON's notes")
    args = p.parse_args(argv)
    if args.episodes < 1:
        raise SystemExit(f"--episodes {args.episodes} must be at least 1")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    options = AlertOptions(
        success_threshold=args.threshold,
        stall_seconds=args.stall_s,
        sweep_thresholds=SWEEP_DEFAULT_THRESHOLDS,
        sweep_stall_s=SWEEP_DEFAULT_STALL_S,
    )
    try:
        options.check()
    except ValueError as exc:
        raise SystemExit(f"bench failure_alerts: {exc}") from None
    runs: list[dict[str, Any]] = []
    task = ""
    for run in args.runs:
        policy = load_target(str(run), "bench failure_alerts")
        try:
            value_policy(policy.policy)
        except ValueError as exc:
            raise SystemExit(f"{run}: {exc}") from None
        meta = policy.metadata
        task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, [])
        task = task or task_cfg.name
        report = evaluate(
            policy,
            task_cfg,
            sim_cfg,
            episodes=args.episodes,
            seeds=(args.eval_seed,),
            alerts=options,
        )
        a = report["alerts"]
        failure_rate = a["failed_episodes"] / max(1, a["scored_episodes"])
        dt = TASKS.get(task_cfg.name).task_cls.control_dt
        clock = clock_baseline(
            [e["length"] * dt for e in report["episodes"]],
            [not e["success"] for e in report["episodes"]],
        )
        seed = run_seed(run, default=len(runs))
        runs.append(
            {
                "run": str(run),
                "seed": seed,
                "success_rate": report["success_rate"],
                "failure_rate": failure_rate,
                "episodes": a["scored_episodes"],
                "precision": a["precision"],
                "recall": a["recall"],
                "lift": _lift(a["precision"], failure_rate),
                "median_lead_s": a["median_lead_s"],
                "mean_lead_s": a["mean_lead_s"],
                "alerted_episodes": a["alerted_episodes"],
                "by_kind": a["by_kind"],
                "sweep": [{**r, "lift": _lift(r["precision"], failure_rate)} for r in a["sweep"]],
                "clock_baseline": [
                    {**r, "lift": _lift(r["precision"], failure_rate)} for r in clock
                ],
            }
        )
    print_table(
        runs,
        ["seed", "success_rate", "failure_rate", "precision", "lift", "recall", "median_lead_s"],
    )
    best = {  # per run, the sweep row of the highest lift that still recalls half the failures
        r["run"]: max(
            (s for s in r["sweep"] if s["lift"] is not None and (s["recall"] or 0) >= 0.5),
            key=lambda s: s["lift"],
            default=None,
        )
        for r in runs
    }
    doc: dict[str, Any] = {
        "benchmark": "failure_alerts",
        "bench_command": "unilab bench failure_alerts " + " ".join(argv or []),
        "task": task,
        "machine": machine_info(),
        "episodes_per_run": args.episodes,
        "eval_seed": args.eval_seed,
        "live_rules": {"success_threshold": args.threshold, "stall_seconds": args.stall_s},
        "rows": [
            {k: v for k, v in r.items() if k not in ("sweep", "clock_baseline")} for r in runs
        ],
        "runs": runs,
        "best_at_half_recall": best,
        "ratios": {
            "mean_precision": _mean([r["precision"] for r in runs]),
            "mean_failure_rate": _mean([r["failure_rate"] for r in runs]),
            "mean_lift": _mean([r["lift"] for r in runs]),
            "mean_recall": _mean([r["recall"] for r in runs]),
            "mean_median_lead_s": _mean([r["median_lead_s"] for r in runs]),
            "mean_best_lift_at_half_recall": _mean(
                [None if b is None else b["lift"] for b in best.values()]
            ),
        },
        "notes": list(args.note),
        "bench_wall_s": time.perf_counter() - t0,
    }
    out = Path(args.out or f"bench/results/failure_alerts_{task}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, doc)
    _plot(out.with_suffix(".png"), runs, task)
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
