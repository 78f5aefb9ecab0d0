"""`unilab bench runtime`: what the runtime costs and what async buys.

1. Collection: env steps/s of the full worker path (task stepping, policy inference,
   writes into the shared-memory ring) with a no-op learner that only takes and hands back
   chunks, against the raw `mujoco.batch` ceiling on the same model, env count and threads,
   measured in the same run. For 1 and 2 workers (one MuJoCo thread each).
2. Overlap: the same collection with a learner that sleeps a fixed time per batch (a
   stand-in for an update of known cost), in sync and in async mode. Sync pays
   sim + learner per batch; async overlaps them.

Ratios: collect_vs_ceiling_w1, collect_vs_ceiling_w2 (alias collect_vs_ceiling: the best
of both), async_vs_sync_overlap.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import mujoco
import numpy as np
from mujoco import batch as mjbatch

from unilab.algos.build import make_task_and_policy
from unilab.algos.registry import ALGORITHMS
from unilab.bench.common import machine_info, print_table, write_json
from unilab.config import compose, to_yaml
from unilab.runtime.fields import info_fields
from unilab.runtime.flat_weights import actor_to_flat
from unilab.runtime.learner_side import LearnerRuntime
from unilab.tasks.registry import make_task
from unilab.train.sim_worker import WORKER_TARGET


def raw_ceiling(
    model: mujoco.MjModel, num_envs: int, nthread: int, substeps: int, seconds: float
) -> float:
    """Env steps/s of bare Batch.step(nstep=substeps) from the home keyframe with noisy controls."""
    batch = mjbatch.Batch(model, num_envs, nthread, persistent=True)
    key = 0 if model.nkey > 0 else -1
    batch.reset(None, key)
    ctrl = batch.bind("ctrl")
    rng = np.random.default_rng(0)
    base = ctrl.copy()
    steps = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        ctrl[:] = base + 0.1 * rng.standard_normal(ctrl.shape)
        batch.step(None, substeps)
        steps += num_envs
    return steps / (time.perf_counter() - t0)


def collect(tokens: list[str], seconds: float, learner_sleep_s: float = 0.0) -> dict[str, Any]:
    """Run the real runtime with a no-op (or sleeping) learner; env steps/s after warm-up."""
    import torch

    cfg = compose(tokens)
    probe, actor = make_task_and_policy(cfg, num_envs=1, seed=0)
    probe.reset()
    cls = ALGORITHMS.get(cfg.algo.name).algo_cls
    fields = {
        **cls.chunk_fields(probe.obs_dims, probe.action_dim),
        **info_fields(sorted(probe.reward_weights), sorted(probe.task_metrics())),
    }
    flat = actor_to_flat(actor)
    runtime = LearnerRuntime(
        cfg,
        to_yaml(cfg),
        fields,
        flat.size,
        torch.device("cpu"),
        worker_target=WORKER_TARGET,
    ).start()
    try:
        runtime.publish(flat)
        for _ in range(3):  # warm-up: workers start, import, build their sims
            runtime.next_batch()
            runtime.publish(flat)
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            batch = runtime.next_batch()
            if learner_sleep_s:
                time.sleep(learner_sleep_s)
            runtime.publish(flat)
            steps += batch.env_steps
        wall = time.perf_counter() - t0
        totals = runtime.stats.totals()
    finally:
        runtime.close()
    return {"env_steps_per_s": steps / wall, "wall_s": wall, "worker_totals": totals}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench runtime", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="short measurements (< 2 minutes)")
    parser.add_argument("--out", default="bench/results/runtime.json", help="JSON output path")
    parser.add_argument("--task", default="quadruped_joystick_flat", help="registered task")
    parser.add_argument("--envs-per-worker", type=int, default=128)
    args = parser.parse_args(argv)
    seconds = 3.0 if args.quick else 12.0
    per = args.envs_per_worker  # below ~100 envs the per-step Python cost shows; see docs

    cfg = compose([f"task={args.task}"])
    task = make_task(cfg.task, num_envs=1, seed=0)
    model, substeps = task.model, task.substeps
    chunk = 8 if args.quick else 24

    rows: list[dict[str, Any]] = []
    ratios: dict[str, float] = {}
    for workers in (1, 2):
        envs = per * workers
        tokens = [
            f"task={args.task}",
            f"sim.num_envs={envs}",
            f"runtime.num_workers={workers}",
            "runtime.threads_per_worker=1",
            "runtime.mode=async",
            "runtime.slots_per_worker=3",
            f"runtime.chunk_len={chunk}",
        ]
        ceiling = raw_ceiling(model, envs, workers, substeps, seconds)
        got = collect(tokens, seconds)
        ratio = got["env_steps_per_s"] / ceiling
        ratios[f"collect_vs_ceiling_w{workers}"] = ratio
        rows.append(
            {
                "case": f"collect, {workers} worker(s)",
                "envs": envs,
                "ceiling_steps_s": ceiling,
                "unilab_steps_s": got["env_steps_per_s"],
                "ratio": ratio,
            }
        )
    ratios["collect_vs_ceiling"] = max(
        ratios["collect_vs_ceiling_w1"], ratios["collect_vs_ceiling_w2"]
    )

    # Overlap: one worker; the learner "updates" for about as long as a chunk takes to collect.
    envs = per
    chunk_time = envs * chunk / max(rows[0]["unilab_steps_s"], 1.0)
    base = [
        f"task={args.task}",
        f"sim.num_envs={envs}",
        "runtime.num_workers=1",
        f"runtime.chunk_len={chunk}",
    ]
    sync = collect([*base, "runtime.mode=sync"], seconds, learner_sleep_s=chunk_time)
    asyn = collect(
        [*base, "runtime.mode=async", "runtime.slots_per_worker=2"],
        seconds,
        learner_sleep_s=chunk_time,
    )
    ratios["async_vs_sync_overlap"] = asyn["env_steps_per_s"] / sync["env_steps_per_s"]
    rows.append(
        {
            "case": f"sync, learner {chunk_time * 1e3:.0f} ms/batch",
            "envs": envs,
            "unilab_steps_s": sync["env_steps_per_s"],
        }
    )
    rows.append(
        {
            "case": f"async, learner {chunk_time * 1e3:.0f} ms/batch",
            "envs": envs,
            "unilab_steps_s": asyn["env_steps_per_s"],
            "ratio": ratios["async_vs_sync_overlap"],
        }
    )

    print_table(rows, ["case", "envs", "ceiling_steps_s", "unilab_steps_s", "ratio"])
    print("ratios:", {k: round(v, 3) for k, v in ratios.items()})
    out = write_json(
        args.out,
        {
            "benchmark": "runtime",
            "machine": machine_info(),
            "task": args.task,
            "quick": args.quick,
            "chunk_len": chunk,
            "seconds_per_measure": seconds,
            "rows": rows,
            "ratios": ratios,
            "targets": {"collect_vs_ceiling": 0.8},
        },
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
