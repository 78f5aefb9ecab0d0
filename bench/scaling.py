"""`unilab bench scaling`: env steps/s against workers, envs per worker and MuJoCo threads,
up to the core count, for the raw `mujoco.batch` ceiling and for unilab's collection path
(no-op learner, async), measured in one run. Shows how cost grows with the work and where
adding workers or threads stops paying.

Ratio: scaling_efficiency_max_workers = (steps/s at the most workers) / (workers × steps/s at
one worker), same envs per worker.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from unilab.bench.common import machine_info, print_table, write_json
from unilab.bench.runtime import collect, raw_ceiling
from unilab.config import compose
from unilab.tasks.registry import make_task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench scaling", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer points, shorter measures")
    parser.add_argument("--out", default="bench/results/scaling.json")
    parser.add_argument("--task", default="quadruped_joystick_flat")
    args = parser.parse_args(argv)

    cores = len(os.sched_getaffinity(0))
    seconds = 2.0 if args.quick else 6.0
    envs_list = [32, 128] if args.quick else [32, 128, 512]
    worker_list = sorted({1, cores})
    task = make_task(compose([f"task={args.task}"]).task, num_envs=1, seed=0)
    rows: list[dict[str, Any]] = []
    for per in envs_list:
        for threads in sorted({1, cores}):
            ceiling = raw_ceiling(task.model, per, threads, task.substeps, seconds)
            rows.append(
                {
                    "path": "ceiling",
                    "workers": 1,
                    "threads": threads,
                    "envs_per_worker": per,
                    "steps_s": ceiling,
                }
            )
        for workers in worker_list:
            tokens = [
                f"task={args.task}",
                f"sim.num_envs={per * workers}",
                f"runtime.num_workers={workers}",
                "runtime.mode=async",
                "runtime.slots_per_worker=3",
                "runtime.chunk_len=16",
            ]
            got = collect(tokens, seconds)
            rows.append(
                {
                    "path": "unilab",
                    "workers": workers,
                    "threads": 1,
                    "envs_per_worker": per,
                    "steps_s": got["env_steps_per_s"],
                }
            )
    print_table(rows, ["path", "workers", "threads", "envs_per_worker", "steps_s"])
    per = envs_list[-1]
    one = next(
        r["steps_s"]
        for r in rows
        if r["path"] == "unilab" and r["workers"] == 1 and r["envs_per_worker"] == per
    )
    most = next(
        r["steps_s"]
        for r in rows
        if r["path"] == "unilab" and r["workers"] == worker_list[-1] and r["envs_per_worker"] == per
    )
    ratios = {"scaling_efficiency_max_workers": most / (worker_list[-1] * one)}
    print("ratios:", {k: round(v, 3) for k, v in ratios.items()})
    out = write_json(
        args.out,
        {
            "benchmark": "scaling",
            "machine": machine_info(),
            "task": args.task,
            "quick": args.quick,
            "rows": rows,
            "ratios": ratios,
        },
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
