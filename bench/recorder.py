"""What recording episodes during training costs, next to what a training batch costs.

    python -m bench.recorder [--task cartpole_balance] [--steps 150000] [--json OUT]

1. Trains the task's preset for `--steps` env steps (`unilab.train.train`) and takes the
   steady-state learner time per batch from metrics.jsonl (startup excluded).
2. Collects real chunks of the same shape (same task, num_envs, chunk_len, algorithm
   fields, an untrained actor) and times `ChunkRecorder.record` over them, commits
   included, for the settings given by `--max-envs`, `--every` and `--background`.

"blocking" is the time the loop waits in `record` (plus the final `close`, spread over the
batches); "cpu" is the process CPU time over the same span, which counts the background
commit thread too. Their ratio to (1) bounds the slowdown recording adds: blocking time
adds to every batch in sync mode, where the learner's time per batch is the loop's; cpu
time matters only where no core is idle (the learner waits for workers part of each batch).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch


def steady_batch_seconds(run_path: Path) -> tuple[float, float, int]:
    """(seconds per batch, env steps/s, iterations) between 20 % of the run and its end."""
    rows = [json.loads(line) for line in (run_path / "metrics.jsonl").read_text().splitlines()]
    if len(rows) < 5:
        raise RuntimeError(f"{run_path}: too few metric rows ({len(rows)}); train longer")
    a, b = rows[len(rows) // 5], rows[-1]

    def wall(row: dict[str, Any]) -> float:
        return float(row["env_steps"]) / float(row["train/steps_per_s"])

    iters = int(b["train/iteration"] - a["train/iteration"])
    seconds = wall(b) - wall(a)
    return seconds / iters, (b["env_steps"] - a["env_steps"]) / seconds, iters


def train_once(task: str, steps: int, out_dir: Path, extra: list[str]) -> dict[str, Any]:
    from unilab.config import compose
    from unilab.train import train

    cfg = compose(
        [
            f"task={task}",
            f"run.total_env_steps={steps}",
            "run.quiet=true",
            "run.export=false",
            "run.checkpoint_every=100000",
            "logging.tensorboard=false",
            f"run.out_dir={out_dir}",
            *extra,
        ]
    )
    run = train(cfg)
    per_batch, sps, iters = steady_batch_seconds(run.path)
    return {
        "task": task,
        "num_envs": cfg.sim.num_envs,
        "chunk_len": cfg.runtime.chunk_len,
        "num_workers": cfg.runtime.num_workers,
        "mode": cfg.runtime.mode,
        "batch_s": per_batch,
        "steps_per_s": sps,
        "iterations_measured": iters,
        "cfg": cfg,
    }


def real_chunks(cfg: Any, n_chunks: int) -> tuple[list[dict[str, np.ndarray]], Any, float]:
    """`n_chunks` consecutive (T, N) chunks of real transitions, the fields and fps."""
    from unilab.algos.build import make_task_and_policy
    from unilab.algos.registry import ALGORITHMS
    from unilab.runtime.fields import info_fields
    from unilab.runtime.rollout import collect_chunk, start_rollout

    n_envs, horizon = cfg.sim.num_envs, cfg.runtime.chunk_len
    task, actor = make_task_and_policy(cfg, n_envs, seed=0)
    algo_cls = ALGORITHMS.get(cfg.algo.name).algo_cls
    fields = {
        **algo_cls.chunk_fields(task.obs_dims, task.action_dim),
        **info_fields(sorted(task.reward_weights), sorted(task.task_metrics())),
    }
    state = start_rollout(task)
    chunks = []
    with torch.no_grad():
        for _ in range(n_chunks):
            buf = {k: np.empty((horizon, n_envs, *s), dtype=d) for k, (s, d) in fields.items()}
            collect_chunk(task, actor, buf, state)
            chunks.append(buf)
    return chunks, fields, 1.0 / task.control_dt


def time_recorder(
    chunks: list[dict[str, np.ndarray]],
    fields: Any,
    fps: float,
    batches: int,
    max_envs: int,
    every: int,
    background: bool,
    root: Path,
) -> dict[str, float]:
    from unilab.data.recorder import ChunkRecorder

    n_envs = chunks[0]["action"].shape[1]
    path = root / f"rec-{max_envs}-{every}.zarr"
    rec = ChunkRecorder(
        path,
        fields,
        num_envs=n_envs,
        fps=fps,
        max_envs=max_envs,
        every_n_batches=every,
        background=background,
        max_share=None,  # the raw cost; `paced_budget` shows the budget at work
    )
    times = np.zeros(batches)
    cpu0 = time.process_time()  # all threads of this process: the commit thread too
    for b in range(batches):
        # Cycling the chunks keeps the per-batch work real (real episode ends, real
        # values); values jump at the wrap, which the recorder neither sees nor minds.
        t0 = time.perf_counter()
        rec.record(chunks[b % len(chunks)], policy_version=b)
        times[b] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rec.close()
    close_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    out = {
        "max_envs": float(max_envs),
        "every_n_batches": float(every),
        "background": float(background),
        "batches": float(batches),
        "record_mean_s": float((times.sum() + close_s) / batches),
        "cpu_mean_s": float(cpu_s / batches),
        "record_median_s": float(np.median(times)),
        "record_max_s": float(times.max()),
        "frames_written": float(rec.frames_written),
        "episodes_written": float(rec.episodes_written),
    }
    shutil.rmtree(path, ignore_errors=True)
    return out


def paced_budget(
    chunks: list[dict[str, np.ndarray]],
    fields: Any,
    fps: float,
    batches: int,
    batch_s: float,
    max_share: float,
    root: Path,
) -> dict[str, float]:
    """The recorder with its default budget, called once per `batch_s` (the measured
    training batch time, slept between calls) as the loop would: the share of wall time
    it took, and how much of the offered data it recorded."""
    from unilab.data.recorder import ChunkRecorder

    n_envs = chunks[0]["action"].shape[1]
    path = root / "paced.zarr"
    rec = ChunkRecorder(path, fields, num_envs=n_envs, fps=fps, max_share=max_share)
    start = time.perf_counter()
    for b in range(batches):
        t0 = time.perf_counter()
        rec.record(chunks[b % len(chunks)], policy_version=b)
        time.sleep(max(0.0, batch_s - (time.perf_counter() - t0)))
    t0 = time.perf_counter()
    rec.close()
    close_s = time.perf_counter() - t0
    wall = time.perf_counter() - start
    offered = batches * chunks[0]["action"].shape[0] * len(rec.columns)
    out = {
        "max_share": max_share,
        "tracked_envs": float(len(rec.columns)),
        "share_pct": 100.0 * (rec.seconds_spent + close_s) / wall,
        "frames_recorded_pct": 100.0 * rec.frames_written / offered,
        "batches_over_budget": float(rec.batches_over_budget),
        "episodes_written": float(rec.episodes_written),
    }
    shutil.rmtree(path, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="cartpole_balance")
    parser.add_argument("--steps", type=int, default=150_000, help="env steps of the training run")
    parser.add_argument("--chunks", type=int, default=24, help="real chunks to cycle through")
    parser.add_argument("--batches", type=int, default=96, help="batches to time the recorder on")
    parser.add_argument("--max-envs", type=int, nargs="+", default=[64])
    parser.add_argument("--every", type=int, nargs="+", default=[1])
    parser.add_argument(
        "--background", type=int, nargs="+", default=[1, 0], help="1: commit on a thread"
    )
    parser.add_argument("--override", nargs="*", default=[], help="extra config overrides")
    parser.add_argument("--paced-batches", type=int, default=200, help="0: skip the paced run")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="bench-recorder-"))
    try:
        trained = train_once(args.task, args.steps, root / "runs", args.override)
        cfg = trained.pop("cfg")
        chunks, fields, fps = real_chunks(cfg, args.chunks)
        rows = []
        for max_envs in args.max_envs:
            for every in args.every:
                for background in args.background:
                    r = time_recorder(
                        chunks, fields, fps, args.batches, max_envs, every, bool(background), root
                    )
                    r["blocking_pct"] = 100.0 * r["record_mean_s"] / trained["batch_s"]
                    r["cpu_pct"] = 100.0 * r["cpu_mean_s"] / trained["batch_s"]
                    rows.append(r)
        paced = (
            paced_budget(chunks, fields, fps, args.paced_batches, trained["batch_s"], 0.05, root)
            if args.paced_batches
            else None
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(
        f"{trained['task']}: {trained['num_envs']} envs x {trained['chunk_len']} steps per "
        f"chunk, {trained['num_workers']} worker(s), {trained['mode']}; training "
        f"{trained['steps_per_s']:,.0f} env steps/s, {1e3 * trained['batch_s']:.1f} ms per batch "
        f"(steady state, {trained['iterations_measured']} batches)"
    )
    print(
        f"{'max_envs':>8} {'every':>5} {'bg':>3} {'block ms':>9} {'median':>7} {'max':>7} "
        f"{'cpu ms':>7} {'block %':>8} {'cpu %':>7}"
    )
    for r in rows:
        print(
            f"{int(r['max_envs']):>8} {int(r['every_n_batches']):>5} {int(r['background']):>3} "
            f"{1e3 * r['record_mean_s']:>9.2f} {1e3 * r['record_median_s']:>7.2f} "
            f"{1e3 * r['record_max_s']:>7.1f} {1e3 * r['cpu_mean_s']:>7.2f} "
            f"{r['blocking_pct']:>7.2f}% {r['cpu_pct']:>6.2f}%"
        )
    if paced is not None:
        print(
            f"paced at {1e3 * trained['batch_s']:.1f} ms per batch, max_share 5 %, all "
            f"{int(paced['tracked_envs'])} tracked envs: recorder took "
            f"{paced['share_pct']:.2f} % of wall time and recorded "
            f"{paced['frames_recorded_pct']:.0f} % of the offered frames "
            f"({int(paced['episodes_written'])} episodes)"
        )
    if args.json:
        doc = {"training": trained, "recorder": rows, "paced": paced}
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
