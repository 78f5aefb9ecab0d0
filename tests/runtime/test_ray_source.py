"""Rollout hosts as Ray actors on a stand-in cluster (two logical nodes on this box, one CPU
each): learning through them, surviving a lost host, the staleness bound in async mode."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from unilab.config import compose
from unilab.config.errors import ConfigError
from unilab.runtime.ray_source import RayChunkSource
from unilab.train.hooks import IterationInfo, TrainHook
from unilab.train.runner import Runner
from unilab.utils.metrics import read_metrics

pytestmark = pytest.mark.ray

COMMON = [
    "task=cartpole_balance",
    "runtime.backend=ray",
    "ray.hosts=2",
    "runtime.num_workers=2",
    "logging.tensorboard=false",
    "run.quiet=true",
    "run.export=false",
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    store = 80 * 2**20
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store})
    c.add_node(num_cpus=1, object_store_memory=store)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


class KillHost(TrainHook):
    """SIGKILL rollout host 0's actor process at one iteration (a lost machine)."""

    name = "kill_host"

    def __init__(self, at: int) -> None:
        self.at = at
        self.killed_pid: int | None = None

    def on_iteration(self, runner: Runner, info: IterationInfo) -> None:
        if info.iteration == self.at:
            assert runner.runtime is not None
            source = runner.runtime.source
            assert isinstance(source, RayChunkSource)
            self.killed_pid = source.pids[0]
            os.kill(self.killed_pid, signal.SIGKILL)


def test_two_ray_hosts_learn_cartpole_and_survive_a_host_kill(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The single-host learning test's run (64 envs, 61,440 steps, sync PPO), over 2 hosts.
    cfg = compose(
        [
            *COMMON,
            "algo=ppo",
            "sim.num_envs=64",
            "run.total_env_steps=61440",
            f"run.out_dir={tmp_path}",
        ]
    )
    kill = KillHost(at=8)
    runner = Runner(cfg, [kill])
    result = runner.learn()
    assert kill.killed_pid is not None
    assert result.summary["supervisor"]["hosts_lost"] == 1
    assert result.summary["supervisor"]["hosts_restarted"] == 1  # Ray brought it back
    assert result.env_steps >= 61440
    rows = read_metrics(result.run.metrics)
    first = next(r["train/mean_return"] for r in rows if r["train/mean_return"] is not None)
    last = rows[-1]["train/mean_return"]
    assert first < 3.0
    assert last > 5.0, f"mean return after 60k steps over 2 Ray hosts: {last}"


def test_async_ray_hosts_keep_the_staleness_bound(cluster: Cluster, tmp_path: Path) -> None:
    cfg = compose(
        [
            *COMMON,
            "algo=appo",
            "algo.max_staleness=2",
            "runtime.mode=async",
            "sim.num_envs=16",
            "runtime.chunk_len=16",
            "run.total_env_steps=4096",
            f"run.out_dir={tmp_path}",
        ]
    )
    result = Runner(cfg).learn()
    hist = {int(k): v for k, v in result.summary["staleness_hist"].items()}
    assert hist and max(hist) <= 2
    assert result.summary["supervisor"]["hosts_lost"] == 0


def test_workers_must_split_evenly_over_hosts() -> None:
    with pytest.raises(ConfigError, match=r"does not split evenly over ray\.hosts=2"):
        compose([*COMMON, "runtime.num_workers=3", "sim.num_envs=48"])
