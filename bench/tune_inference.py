"""`unilab bench tune_inference RUN`: do Thompson-tuned inference settings beat the policy's
defaults at an equal evaluation budget? (issue 16)

    unilab bench tune_inference RUN --seeds 0,1,2 [--rounds 30 --episodes-per-round 16
        --compare-seeds 10] [--out PATH] [task/sim overrides]
    unilab bench tune_inference --from-reports a.json b.json ... --out PATH

Each seed is one `unilab tune-inference` (`unilab.deploy.tune_inference`): `--rounds` bandit
rounds of `--episodes-per-round` episodes, then the defaults and the chosen settings each on
`--compare-seeds` x `--episodes-per-round` fresh episodes (never the tuning's). Per seed:
the chosen settings, both success rates, their difference and its binomial standard error;
overall the mean difference, how many seeds the choice won, and the tuning's own budget.
`--from-reports` summarizes reports that `unilab tune-inference --out` already wrote.

Writes JSON (`rows`, `ratios`: mean chosen - defaults), by default
`bench/results/tune_inference_<task>.json`.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from unilab.bench.common import machine_info, print_table, write_json


def seed_row(report: dict[str, Any], seed: int) -> dict[str, Any]:
    """One table row from a `unilab.tune_inference/1` report."""
    cmp = report["comparison"]
    n = int(cmp["episodes_per_arm"])
    p_def, p_cho = cmp["defaults"]["success_rate"], cmp["chosen"]["success_rate"]
    se = math.sqrt((p_def * (1 - p_def) + p_cho * (1 - p_cho)) / n)
    return {
        "seed": seed,
        "chosen": " ".join(f"{k}={v}" for k, v in report["chosen"].items()),
        "defaults_success": p_def,
        "chosen_success": p_cho,
        "difference": p_cho - p_def,
        "difference_se": se,
        "episodes_per_arm": n,
        "tuning_episodes": sum(int(r["episodes"]) for r in report["rounds"]),
    }


def summarize(reports: list[dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    rows = [seed_row(r, s) for r, s in zip(reports, seeds, strict=True)]
    diffs = [r["difference"] for r in rows]
    mean = sum(diffs) / len(diffs)
    return {
        "rows": rows,
        "ratios": {
            "chosen_minus_defaults": mean,
            "seeds_chosen_better": sum(d > 0 for d in diffs),
            "seeds": len(rows),
        },
        "defaults": reports[0]["defaults"],
        "space": reports[0]["space"],
        "skipped": reports[0]["skipped"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="unilab bench tune_inference", description=__doc__)
    p.add_argument("run", nargs="?", help="a chunked policy's run directory (or policy.onnx)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--episodes-per-round", type=int, default=16)
    p.add_argument("--compare-seeds", type=int, default=10)
    p.add_argument("--from-reports", nargs="+", type=Path, help="summarize these reports")
    p.add_argument("--out", default="")
    p.add_argument("--note", action="append", default=[], help="a line for the JSON's notes")
    p.add_argument("overrides", nargs="*", help="task/sim key=value overrides for the run")
    args = p.parse_args(argv)
    if args.from_reports:
        reports = [json.loads(path.read_text()) for path in args.from_reports]
        seeds = [int(r["rounds"][0]["seed"]) for r in reports]
        source = str(reports[0]["source"])
    elif args.run:
        from unilab.cli.play import load_target
        from unilab.deploy.sim_task import configs_for_policy
        from unilab.deploy.tune_inference import tune_inference

        policy = load_target(args.run, "bench tune_inference")
        meta = policy.metadata
        task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, args.overrides)
        seeds = [int(s) for s in args.seeds.split(",")]
        reports = []
        for seed in seeds:
            reports.append(
                tune_inference(
                    policy,
                    task_cfg,
                    sim_cfg,
                    rounds=args.rounds,
                    episodes_per_round=args.episodes_per_round,
                    seed=seed,
                    compare_seeds=args.compare_seeds,
                )
            )
            print(f"seed {seed}: {seed_row(reports[-1], seed)}", flush=True)
        source = str(args.run)
    else:
        p.error("give a RUN to tune, or --from-reports")
    task = str(reports[0]["task"])
    summary = summarize(reports, seeds)
    print_table(summary["rows"], list(summary["rows"][0]))
    out = Path(args.out or f"bench/results/tune_inference_{task}.json")
    write_json(
        out,
        {
            "benchmark": "tune_inference",
            "bench_command": "unilab bench tune_inference " + " ".join(argv or []),
            "task": task,
            "source": source,
            **summary,
            "notes": args.note,
            "reports": reports,
            "machine": machine_info(),
        },
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
