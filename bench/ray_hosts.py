"""`unilab bench ray_hosts`: Ray rollout hosts on a stand-in cluster (logical nodes on this box).

Measures (docs/decisions/0071 turns them into a saturation estimate):
- transport: the cost of one chunk through Ray (actor returns numpy arrays, the learner
  `ray.get`s and copies them into its batch) for the quadruped task's chunk size, against a
  plain numpy copy of the same bytes;
- learner: PPO update time per env step for the quadruped preset on this CPU;
- throughput vs hosts: cartpole async training env steps/s with 1 and 2 hosts (1 worker
  each, one CPU per logical node).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import torch

from unilab.bench.common import machine_info, print_table, write_json
from unilab.config import compose

QUAD_ENVS, QUAD_T = 256, 24
"""The quadruped benchmark's worker chunk (bench/results/learn_quadruped.json)."""


def quadruped_fields() -> tuple[dict[str, Any], Any]:
    from unilab.algos.registry import ALGORITHMS
    from unilab.runtime.fields import info_fields
    from unilab.train.runner import probe_task

    cfg = compose(["task=quadruped_joystick_flat"])
    shapes = probe_task(cfg)
    algo_cls = ALGORITHMS.get(cfg.algo.name).algo_cls
    fields = algo_cls.chunk_fields(shapes.obs_dims, shapes.action_dim)
    fields.update(info_fields(shapes.reward_terms, shapes.task_metrics))
    return fields, (cfg, shapes, algo_cls)


class ChunkMaker:
    """An actor that returns ready-made chunks (k per call) of a given layout."""

    def __init__(self, fields: dict[str, Any], envs: int, steps: int) -> None:
        self.fields = {
            name: np.ones((1, steps, envs, *shape), np.dtype(dtype))
            for name, (shape, dtype) in fields.items()
        }

    def pull(self, k: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        header = np.zeros((k, 6), np.int64)
        return header, {n: np.repeat(a, k, axis=0) for n, a in self.fields.items()}


def transport(ray: Any, fields: dict[str, Any], calls: int) -> dict[str, float]:
    maker = ray.remote(ChunkMaker).options(num_cpus=1).remote(fields, QUAD_ENVS, QUAD_T)
    ray.get(maker.pull.remote(1))
    chunk_bytes = sum(
        int(np.prod((QUAD_T, QUAD_ENVS, *shape))) * np.dtype(dtype).itemsize
        for shape, dtype in fields.values()
    )
    staging = {n: np.empty((QUAD_T, QUAD_ENVS, *s), np.dtype(d)) for n, (s, d) in fields.items()}
    out: dict[str, float] = {"chunk_bytes": chunk_bytes}
    for k in (1, 4):
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            _, got = ray.get(maker.pull.remote(k))
            for i in range(k):
                for name, array in got.items():
                    np.copyto(staging[name], array[i])
            times.append((time.perf_counter() - t0) / k)
        out[f"ray_ms_per_chunk_k{k}"] = 1e3 * statistics.median(times)
    src = {n: np.ones_like(a) for n, a in staging.items()}
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        for name, array in src.items():
            np.copyto(staging[name], array)
        times.append(time.perf_counter() - t0)
    out["numpy_copy_ms_per_chunk"] = 1e3 * statistics.median(times)
    ray.kill(maker)
    return out


def learner_cost(setup: Any, repeats: int) -> dict[str, float]:
    cfg, shapes, algo_cls = setup
    cfg.algo.actor_hidden = [128, 128, 128]
    cfg.algo.critic_hidden = [128, 128, 128]
    algo = algo_cls(cfg.algo, shapes.obs_dims, shapes.action_dim, torch.device("cpu"))
    fields = algo_cls.chunk_fields(shapes.obs_dims, shapes.action_dim)
    rng = np.random.default_rng(0)
    batch = {
        n: torch.from_numpy(rng.normal(size=(QUAD_T, QUAD_ENVS, *s)).astype(np.dtype(d)))
        for n, (s, d) in fields.items()
    }
    batch["terminated"].zero_()
    batch["truncated"].zero_()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        algo.update(batch)
        times.append(time.perf_counter() - t0)
    per_step = statistics.median(times) / (QUAD_T * QUAD_ENVS)
    return {"update_s": statistics.median(times), "update_us_per_env_step": 1e6 * per_step}


def throughput(hosts: int, steps: int) -> dict[str, Any]:
    from unilab.train.runner import Runner

    out = tempfile.mkdtemp(prefix="bench_ray_hosts_")
    cfg = compose(
        [
            "task=cartpole_balance",
            "algo=appo",
            "runtime.mode=async",
            "runtime.backend=ray",
            f"ray.hosts={hosts}",
            f"runtime.num_workers={hosts}",
            f"sim.num_envs={64 * hosts}",
            "logging.tensorboard=false",
            "run.quiet=true",
            "run.export=false",
            f"run.total_env_steps={steps}",
            f"run.out_dir={out}",
        ]
    )
    result = Runner(cfg).learn()
    return {
        "hosts": hosts,
        "env_steps": result.env_steps,
        "wall_s": result.wall_s,
        "env_steps_per_s": result.env_steps / result.wall_s,
        "learner_idle_pct": result.summary["learner_idle_pct"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unilab bench ray_hosts", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="bench/results/ray_hosts.json")
    args = parser.parse_args(argv)
    import ray
    from ray.cluster_utils import Cluster

    torch.set_num_threads(1)
    store = 120 * 2**20
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store}
    )
    cluster.add_node(num_cpus=1, object_store_memory=store)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        fields, setup = quadruped_fields()
        result: dict[str, Any] = {"benchmark": "ray_hosts", "machine": machine_info()}
        result["transport_quadruped_chunk"] = transport(ray, fields, 10 if args.quick else 40)
        result["learner_quadruped_cpu"] = learner_cost(setup, 2 if args.quick else 5)
        steps = 20_480 if args.quick else 81_920
        rows = [throughput(h, steps) for h in (1, 2)]
        result["throughput_vs_hosts"] = rows
        print_table(rows, ["hosts", "env_steps", "wall_s", "env_steps_per_s", "learner_idle_pct"])
        print(result["transport_quadruped_chunk"], result["learner_quadruped_cpu"])
        write_json(args.out, result)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
