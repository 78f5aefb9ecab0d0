"""`runtime.backend=ray`: the run's chunk source is a set of Ray rollout hosts.

The hosts run the train layer's worker entry point (`WORKER_TARGET`) with the run's config,
so a host's workers are the single-box workers; `runtime.num_workers` (all hosts together)
is split evenly over `ray.hosts`, and `sim.num_envs` over the workers, as on one box.
"""

from __future__ import annotations

from unilab.config.errors import ConfigError
from unilab.config.schema import Config
from unilab.runtime.chunk_spec import ChunkSpec
from unilab.runtime.fields import FieldSpecs
from unilab.runtime.ray_source import HostPlan, RayChunkSource, RayNotInstalled
from unilab.train.sim_worker import WORKER_TARGET


def ray_source(
    cfg: Config, config_yaml: str, fields: FieldSpecs, actor_floats: int
) -> RayChunkSource:
    rt, ray = cfg.runtime, cfg.ray
    # compose checked that runtime.num_workers splits evenly over ray.hosts
    plan = HostPlan(
        hosts=ray.hosts,
        workers_per_host=rt.num_workers // ray.hosts,
        envs_per_worker=cfg.sim.num_envs // rt.num_workers,
        chunk_len=rt.chunk_len,
        slots_per_worker=rt.slots_per_worker,
        actor_floats=actor_floats,
        worker_target=WORKER_TARGET,
        # no worker states on hosts: their disks are not the run directory's
        worker_config={"config_yaml": config_yaml, "state_dir": None, "save_state_every": 0},
        seed=cfg.run.seed,
        hang_timeout_s=rt.hang_timeout_s,
    )
    spec = ChunkSpec({name: (shape, dtype) for name, (shape, dtype) in fields.items()})
    try:
        return RayChunkSource(
            spec,
            plan,
            address=ray.address,
            num_cpus_per_host=ray.num_cpus_per_host,
            max_restarts=ray.max_restarts,
            pull_timeout_s=ray.pull_timeout_s,
            object_store_mb=ray.object_store_mb,
        )
    except RayNotInstalled as exc:
        raise ConfigError(str(exc)) from None
