"""Mid-run evaluation: every `every` iterations, the current policy on a private task.

Each evaluation copies the learner's policy to the CPU and runs one deterministic episode
per env (`episodes` envs) from the same start states every time (the task's state is
restored before each reset), so evaluations along a run differ only by the policy. Chunked
policies (the VLA) execute their own way (`n_act` actions per chunk, temporal ensembling
as configured) with the flow's noise drawn from `seed`. It logs
`eval/return_mean`, `eval/length_mean` and, for tasks with a `success` metric,
`eval/success_rate`, and keeps every evaluation in `history`.

The learner waits while it runs (in sync mode the workers wait too): its cost is one
episode of `episodes` envs per `every` iterations and shows in the profile as `eval`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from unilab.algos.build import load_weights, make_task_and_policy
from unilab.runtime.rollout import rollout
from unilab.tasks.base import Task
from unilab.train.hooks import IterationInfo, TrainHook

if TYPE_CHECKING:
    from unilab.runtime.torch_policy import PolicyModule
    from unilab.train.runner import Runner


class EvalHook(TrainHook):
    name = "eval"
    handles = ("eval.every",)

    def __init__(self, every: int, episodes: int = 16, seed: int = 12345) -> None:
        if every < 1 or episodes < 1:
            raise ValueError(
                f"EvalHook: every={every} and episodes={episodes} must both be at least 1"
            )
        self.every, self.episodes, self.seed = every, episodes, seed
        self.history: list[dict[str, Any]] = []
        """One entry per evaluation: iteration, env_steps, return/length means, success."""
        self._task: Task | None = None
        self._policy: PolicyModule | None = None
        self._start: tuple[Any, dict[str, np.ndarray]] | None = None

    def on_start(self, runner: Runner) -> None:
        self._task, self._policy = make_task_and_policy(runner.cfg, self.episodes, self.seed)
        self._start = (self._task.sim.snapshot(), self._task.get_state())

    def on_iteration(self, runner: Runner, it: IterationInfo) -> None:
        if it.iteration % self.every == 0:
            it.log.update(self.evaluate(runner, it.iteration, it.env_steps))

    def evaluate(self, runner: Runner, iteration: int, env_steps: int) -> dict[str, float]:
        task, policy, start = self._task, self._policy, self._start
        assert task is not None and policy is not None and start is not None
        load_weights(policy, runner.policy)
        task.sim.restore(start[0])
        task.set_state(start[1])
        result = rollout(
            task,
            policy,
            episodes=self.episodes,
            one_per_env=True,
            steps=task.max_episode_steps + 1,
            noise_seed=self.seed,
        )
        lengths = [e.length for e in result.episodes]
        row = {
            "eval/return_mean": result.mean_return() or 0.0,
            "eval/length_mean": float(np.mean(lengths)) if lengths else 0.0,
        }
        rate = result.success_rate()
        if rate is not None:
            row["eval/success_rate"] = rate
        self.history.append({"iteration": iteration, "env_steps": env_steps, **row})
        return row

    def close(self) -> None:
        self._task = None
        self._policy = None
