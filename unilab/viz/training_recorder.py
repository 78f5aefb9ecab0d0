"""Rerun recordings during training: every `every` iterations, a short deterministic
rollout of the current actor on a few envs of a private task, written to
`<run>/media/train_<iteration>.rrd` (one entity tree per env: `env_<i>/...`).

It runs in the learner process between updates. Its cost is one rollout of `steps`
steps on `num_envs` envs plus the file write, spread over `every` iterations; the
defaults keep it near 1 % of a cart-pole training run (see docs/decisions/0007).

Hook (in the training loop, after the weights are published each iteration):

    recorder = TrainingRecorder(cfg, run.media) if <viz.rerun enabled> else None
    ...
    if recorder is not None:
        recorder.maybe_record(iteration, algo.actor)
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import rerun as rr
import torch

from unilab.algos.base import actor_to_flat, flat_to_actor
from unilab.config.schema import Config
from unilab.viz.recorder import APPLICATION_ID, RolloutRecorder


class TrainingRecorder:
    def __init__(
        self,
        cfg: Config,
        media_dir: Path,
        every: int = 50,
        steps: int = 200,
        num_envs: int = 2,
        seed: int = 12345,
    ) -> None:
        from unilab.algos.registry import ALGORITHMS
        from unilab.tasks.registry import make_task

        if every < 1 or steps < 1 or num_envs < 1:
            raise ValueError(
                f"TrainingRecorder: every={every}, steps={steps} and num_envs={num_envs} "
                "must all be at least 1"
            )
        self.every, self.steps, self.media_dir = every, steps, Path(media_dir)
        self.task = make_task(cfg.task, num_envs=num_envs, seed=seed, sim_cfg=cfg.sim)
        entry = ALGORITHMS.get(cfg.algo.name)
        self.actor = entry.algo_cls.build_actor(cfg.algo, self.task.obs_dims, self.task.action_dim)
        self.actor.eval()
        self.seconds = 0.0
        """Total time spent recording, for the overhead report."""
        self.recordings: list[Path] = []

    def maybe_record(self, iteration: int, actor: torch.nn.Module) -> Path | None:
        if iteration % self.every:
            return None
        t0 = time.perf_counter()
        flat_to_actor(self.actor, actor_to_flat(actor))  # a CPU copy; the learner's may be on GPU
        path = self.record(self.media_dir / f"train_{iteration:09d}.rrd", iteration)
        self.seconds += time.perf_counter() - t0
        self.recordings.append(path)
        return path

    def record(self, path: Path, iteration: int) -> Path:
        task = self.task
        names = list(task.robot.joint_names)
        if len(names) != task.action_dim:
            names = [f"a{i}" for i in range(task.action_dim)]
        recorders = [
            RolloutRecorder(task.model, names, list(task.reward_weights), task.state_attrs)
            for _ in range(task.num_envs)
        ]
        obs = task.reset()
        self._add(recorders, 0, None, None)
        for step in range(1, self.steps + 1):
            with torch.no_grad():
                actions = self.actor(torch.from_numpy(obs["policy"])).numpy()
            out = task.step(actions)
            obs = out.obs
            self._add(recorders, step, actions, out.reward_terms)
        path.parent.mkdir(parents=True, exist_ok=True)
        rec = rr.RecordingStream(APPLICATION_ID)
        rec.save(str(path))
        rec.send_recording_name(f"{task.cfg.name} iteration {iteration}")
        for env, recorder in enumerate(recorders):
            recorder.write(rec, prefix=f"env_{env}/")
        rec.flush()
        rec.disconnect()
        return path

    def _add(
        self,
        recorders: list[RolloutRecorder],
        step: int,
        actions: np.ndarray | None,
        terms: dict[str, np.ndarray] | None,
    ) -> None:
        task, sim = self.task, self.task.sim
        for env, recorder in enumerate(recorders):
            recorder.add(
                step,
                step * task.control_dt,
                sim.xpos[env],
                sim.xquat[env],
                sim.qpos[env],
                None if actions is None else actions[env],
                None if terms is None else {k: float(v[env]) for k, v in terms.items()},
                {name: np.asarray(getattr(task, name))[env] for name in task.state_attrs},
            )
