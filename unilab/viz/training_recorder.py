"""Rerun recordings during training: every `every` iterations, a short deterministic
rollout of the current policy on a few envs of a private task, written to
`<run>/media/train_<iteration>.rrd` (one entity tree per env: `env_<i>/...`).

`TrainingRecorder` is a `unilab.train.hooks.TrainHook` (`viz.rerun=true`; attached by
`unilab.workflows.train`). It runs in the learner process between updates. Its cost is
one rollout of `steps` steps on `num_envs` envs plus the file write, spread over `every`
iterations; the defaults keep it near 1 % of a cart-pole training run (docs/decisions/0007).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import rerun as rr

from unilab.algos.build import load_weights, make_task_and_policy
from unilab.runtime.rollout import StepInfo, rollout
from unilab.train.hooks import IterationInfo, TrainHook
from unilab.viz.recorder import APPLICATION_ID, RolloutRecorder

if TYPE_CHECKING:
    from unilab.runtime.torch_policy import PolicyModule
    from unilab.tasks.base import Task
    from unilab.train.runner import Runner


class TrainingRecorder(TrainHook):
    name = "viz"
    handles = ("viz.rerun",)

    def __init__(
        self,
        media_dir: Path | None = None,
        every: int = 50,
        steps: int = 200,
        num_envs: int = 2,
        seed: int = 12345,
    ) -> None:
        """`media_dir` defaults to the run's `media/`."""
        if every < 1 or steps < 1 or num_envs < 1:
            raise ValueError(
                f"TrainingRecorder: every={every}, steps={steps} and num_envs={num_envs} "
                "must all be at least 1"
            )
        self.every, self.steps, self.num_envs, self.seed = every, steps, num_envs, seed
        self.media_dir = None if media_dir is None else Path(media_dir)
        self.seconds = 0.0
        """Total time spent recording, for the overhead report."""
        self.recordings: list[Path] = []
        self.task: Task | None = None
        self.policy: PolicyModule | None = None

    def on_start(self, runner: Runner) -> None:
        self.task, self.policy = make_task_and_policy(runner.cfg, self.num_envs, self.seed)
        if self.media_dir is None:
            self.media_dir = runner.run.media

    def on_iteration(self, runner: Runner, it: IterationInfo) -> None:
        self.maybe_record(it.iteration, runner.policy)

    def maybe_record(self, iteration: int, policy: PolicyModule) -> Path | None:
        """Record `policy` (the learner's) when `iteration` is a multiple of `every`."""
        if iteration % self.every:
            return None
        assert self.policy is not None and self.media_dir is not None
        t0 = time.perf_counter()
        load_weights(self.policy, policy)  # a CPU copy; the learner's may be on GPU
        path = self.record(self.media_dir / f"train_{iteration:09d}.rrd", iteration)
        self.seconds += time.perf_counter() - t0
        self.recordings.append(path)
        return path

    def record(self, path: Path, iteration: int) -> Path:
        task, policy = self.task, self.policy
        assert task is not None and policy is not None
        names = list(task.robot.joint_names)
        if len(names) != task.action_dim:
            names = [f"a{i}" for i in range(task.action_dim)]
        recorders = [
            RolloutRecorder(task.model, names, list(task.reward_weights), task.state_attrs)
            for _ in range(task.num_envs)
        ]
        obs = task.reset()
        self._add(recorders, 0, None, None)

        def on_step(info: StepInfo) -> None:
            self._add(recorders, info.step, info.actions, info.result.reward_terms)

        rollout(task, policy, steps=self.steps, on_step=on_step, obs=obs)
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
        task = self.task
        assert task is not None
        sim = task.sim
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

    def close(self) -> None:
        self.task = None
        self.policy = None
