"""Camera images and instruction ids travel the training runtime in their own dtypes: a real
sim worker process renders them into the shared-memory ring, the learner receives uint8 /
int64 tensors, and the training recorder stores them; every byte equals what the same task,
seed and weights produce in this process. The ring's size is said at start and bounded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.algos.build import build_policy, make_task_and_policy
from unilab.algos.registry import ALGORITHMS
from unilab.config import compose
from unilab.config.compose import to_yaml
from unilab.config.errors import ConfigError
from unilab.config.schema import Config
from unilab.data import EpisodeStore
from unilab.data.recorder import ChunkRecorder
from unilab.runtime.fields import FieldSpecs, observation_fields, ring_field
from unilab.runtime.flat_weights import actor_to_flat, flat_to_actor
from unilab.runtime.learner_side import LearnerRuntime
from unilab.runtime.rollout import collect_chunk, start_rollout
from unilab.runtime.shm import list_segments
from unilab.runtime.torch_policy import NumpyPolicy
from unilab.train.sim_worker import WORKER_TARGET

GROUPS = ("images/front", "images/wrist", "instruction")
T = 24  # steps per chunk: episodes of 10 steps end twice inside it


def _config(*extra: str) -> Config:
    return compose(
        [
            "task=arm_pick_place",
            "algo=ppo",
            "task.episode_length_s=0.5",
            "sim.num_envs=2",
            "runtime.num_workers=1",
            f"runtime.chunk_len={T}",
            "run.seed=3",
            *extra,
        ]
    )


def _fields(cfg: Config) -> FieldSpecs:
    task, _ = make_task_and_policy(cfg, 1, 0)
    spec = task.observation_spec()
    algo = ALGORITHMS.get("ppo").algo_cls
    fields = algo.chunk_fields(dict(task.obs_dims), task.action_dim)
    fields.update(observation_fields(spec, GROUPS))
    task.close()
    return fields


def test_images_survive_ring_learner_and_store_bit_exactly(tmp_path: Path) -> None:
    cfg = _config()
    fields = _fields(cfg)
    assert fields["images_front"] == ((64, 64, 3), "uint8")
    assert fields["obs_instruction"] == ((16,), "int64")
    torch.manual_seed(0)
    learner_actor = build_policy(cfg.algo, make_task_and_policy(cfg, 1, 0)[0])
    flat = actor_to_flat(learner_actor)
    said: list[str] = []
    runtime = LearnerRuntime(
        cfg, to_yaml(cfg), fields, flat.size, torch.device("cpu"),
        worker_target=WORKER_TARGET, notify=said.append,
    ).start()  # fmt: skip
    try:
        runtime.publish(flat)
        batch = runtime.next_batch()
        host = {k: v.copy() for k, v in runtime.host_batch.items()}
        recorder = ChunkRecorder(
            tmp_path / "s.zarr", fields, num_envs=2, fps=20.0, background=False
        )
        recorder.record(runtime.host_batch, batch.policy_versions)
        recorder.close()
    finally:
        runtime.close()
    assert list_segments(runtime.owner.prefix) == []
    assert said and "ring buffer" in said[0] and "runtime.max_ring_mb=1024" in said[0]
    front = batch.tensors["images_front"]
    assert front.dtype == torch.uint8 and tuple(front.shape) == (T, 2, 64, 64, 3)
    assert batch.tensors["obs_instruction"].dtype == torch.int64

    # The same worker, in this process: seed 3 (run seed + worker 0), the published weights.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the worker runs
    try:
        torch.manual_seed(3)
        task, actor = make_task_and_policy(cfg, 2, 3)
        state = start_rollout(task)
        flat_to_actor(actor, flat)
        want = {n: np.empty((T, 2, *s), np.dtype(d)) for n, (s, d) in fields.items()}
        collect_chunk(task, NumpyPolicy(actor), want, state)
        task.close()
    finally:
        torch.set_num_threads(threads)
    for group in GROUPS:
        name = ring_field(group)
        assert host[name].tobytes() == want[name].tobytes(), name
        assert batch.tensors[name].numpy().tobytes() == want[name].tobytes(), name
    assert np.ptp(want["images_front"][0, 0]) > 50  # a real render, not a constant

    with EpisodeStore.open(tmp_path / "s.zarr", "r") as store:
        assert len(store) == 2  # per env: the episode of steps 10..19, whole
        for env in range(2):  # both end at step 19: committed in env order
            frames = store.episode(env)
            rows = slice(10, 20)
            for group in GROUPS:
                stored = frames[group if group.startswith("images/") else f"obs/{group}"]
                assert stored.tobytes() == want[ring_field(group)][rows, env].tobytes(), group


def test_a_ring_over_the_limit_is_refused_before_it_exists() -> None:
    cfg = _config("runtime.max_ring_mb=1")
    fields = _fields(cfg)
    with pytest.raises(ConfigError, match=r"ring buffer 2\.\d MiB.*exceeds runtime\.max_ring_mb=1"):
        LearnerRuntime(
            cfg, to_yaml(cfg), fields, 10, torch.device("cpu"), worker_target=WORKER_TARGET
        )
