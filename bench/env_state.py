"""What saving and restoring one env costs next to one step of the whole batch.

Per env: `BatchedSim.env_snapshot` + `restore_env` (physics only) and `Task.save_env` +
`restore_env` (which also observes every env, as restart does), against one `Task.step` of
all envs, measured interleaved in the same run (the median over rounds of each mean), with\ndomain randomization off and on.

    unilab bench env_state [--task arm_reach] [--envs 64] [--out PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from unilab.bench.common import machine_info, print_table, write_json
from unilab.config import compose
from unilab.tasks.registry import make_task


def _mean_us(fn: Callable[[], object], calls: int) -> float:
    """Mean µs per call over `calls` back-to-back calls."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1e6 * (time.perf_counter() - t0) / calls


DR_OVERRIDES = [
    "task.randomization.friction_scale=[0.5,1.5]",
    "task.randomization.mass_scale=[0.8,1.2]",
]
"""Friction and masses: masses make every restore run set_const for that env."""


def measure(name: str, num_envs: int, randomized: bool, rounds: int, calls: int) -> dict[str, Any]:
    """Median µs per call of one batch step and of each save + restore pair, and their ratios."""
    cfg = compose([f"task={name}", *(DR_OVERRIDES if randomized else [])]).task
    task = make_task(cfg, num_envs=num_envs, seed=0)
    task.reset()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (calls, num_envs, task.action_dim)).astype(np.float32)
    for a in actions[:10]:  # off the start state
        task.step(a)
    sim, n, counter = task.sim, num_envs, iter(range(10**9))

    def step() -> None:
        task.step(actions[next(counter) % len(actions)])

    def sim_pair() -> None:
        env = next(counter) % n
        sim.restore_env((env + 1) % n, sim.env_snapshot(env))

    def task_pair() -> None:
        env = next(counter) % n
        task.restore_env((env + 1) % n, task.save_env(env))

    ops = {"batch_step": step, "sim_snapshot_restore": sim_pair, "task_save_restore": task_pair}
    times: dict[str, list[float]] = {op: [] for op in ops}
    for _ in range(rounds):  # interleaved: load bursts on a shared box hit all alike
        for op, fn in ops.items():
            times[op].append(_mean_us(fn, calls))
    task.close()
    med = {op: statistics.median(v) for op, v in times.items()}
    return {
        "task": name,
        "num_envs": n,
        "randomization": "friction+mass" if randomized else "off",
        **{f"{op}_us": us for op, us in med.items()},
        "sim_pair_per_step": med["sim_snapshot_restore"] / med["batch_step"],
        "task_pair_per_step": med["task_save_restore"] / med["batch_step"],
        "runs_us": {op: [round(x, 1) for x in v] for op, v in times.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="arm_reach")
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    parser.add_argument("--calls", type=int, default=50, help="calls per round and operation")
    parser.add_argument("--out", default="bench/results/env_state.json")
    args = parser.parse_args(argv)
    rows = [measure(args.task, args.envs, dr, args.rounds, args.calls) for dr in (False, True)]
    cols = ["randomization", "batch_step_us", "sim_snapshot_restore_us", "task_save_restore_us"]
    print_table(rows, [*cols, "sim_pair_per_step", "task_pair_per_step"])
    notes = [
        "sim pair: BatchedSim.env_snapshot + restore_env of one env; task pair: Task.save_env +"
        " restore_env, which also observes every env; batch step: one Task.step of all envs.",
    ]
    out = write_json(
        args.out, {"machine": machine_info(("numpy", "mujoco")), "rows": rows, "notes": notes}
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
