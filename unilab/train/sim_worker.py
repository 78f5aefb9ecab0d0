"""The sim worker process entry point: the run's task and policy, then the runtime's loop.

The supervisor starts it by its path, `WORKER_TARGET`; composing a task with an algorithm's
policy is the train layer's job, the loop itself (`unilab.runtime.sim_worker`) is the
runtime's.
"""

from __future__ import annotations

import torch

from unilab.runtime.branching import BranchPlan
from unilab.runtime.sim_worker import pin_to_core, run_sim_worker
from unilab.runtime.worker_base import WorkerContext

WORKER_TARGET = "unilab.train.sim_worker:sim_worker_main"


def sim_worker_main(ctx: WorkerContext) -> None:
    torch.set_num_threads(1)  # MuJoCo's threads own this worker's cores
    from unilab.algos.build import make_task_and_policy
    from unilab.config.compose import config_from_yaml

    cfg = config_from_yaml(ctx.config["config_yaml"])
    if cfg.runtime.pin_cpus:
        pin_to_core(ctx.config["cores"], ctx.worker_id)
    torch.manual_seed(ctx.seed)
    task, policy = make_task_and_policy(
        cfg, ctx.num_envs, ctx.seed, nthread=cfg.runtime.threads_per_worker
    )
    from unilab.algos.registry import ALGORITHMS

    rt = cfg.runtime
    branching = BranchPlan.check(rt.branching_k, rt.branching_every, ctx.num_envs)
    n_act = ALGORITHMS.get(cfg.algo.name).algo_cls.rollout_n_act(cfg.algo)
    run_sim_worker(ctx, task, policy, sync=rt.mode == "sync", n_act=n_act, branching=branching)
