"""Callbacks a `Runner` calls: what recorders, evaluation, export and benchmarks attach to.

Subclass `TrainHook` and override what you need; attach with `Runner(cfg, hooks=[...])` or
`runner.add_hook(...)`. Several hooks may attach; they run in the order given.

- `on_start(runner)`: the runtime is built (not yet started); build what the hook needs.
- `on_iteration(runner, it)`: after each update and weight publish (RL) or gradient step
  (offline algorithms, which have no batch of chunks: `it.batch` is None). `it.host_batch`
  is the batch just learned from (valid until the next iteration); entries put into `it.log`
  are written with the iteration's metrics (`metrics.jsonl`, TensorBoard).
- `on_checkpoint(runner, path)`: a checkpoint was written (mid-run or final).
- `on_end(runner, result)`: the run finished (budget, wall time or a stop signal) and its
  summary is written; the last checkpoint is on disk. Problems a hook reports with
  `result.problems.append(...)` make the `unilab train` exit status 1.
- `close()`: always runs last, also after an error: release files and tasks.

The Runner isolates hooks from the learner's random streams (torch, numpy, python): a hook
that builds a network or samples does not change what the learner computes.
Hooks run in the learner process between updates; each one's time shows in the run's
profile under its `name`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from unilab.runtime.learner_side import Batch
    from unilab.train.run_dir import RunDir
    from unilab.train.runner import Runner


@dataclass
class IterationInfo:
    iteration: int
    """Learner iterations done, this one included (offline: gradient steps)."""
    env_steps: int
    batch: Batch | None
    """The batch learned from: device tensors, policy versions, staleness, worker events
    (None offline: the frames came from an episode store)."""
    host_batch: dict[str, np.ndarray]
    """The same batch as host numpy arrays, field -> (T, N, ...) ({} offline)."""
    metrics: dict[str, float]
    """What the algorithm's update returned."""
    mean_return: float | None
    """Mean return of the last 100 finished training episodes."""
    log: dict[str, float] = field(default_factory=dict)
    """Hooks add metrics here (e.g. ``eval/success_rate``); they are logged this iteration."""


@dataclass
class RunResult:
    run: RunDir
    iterations: int
    env_steps: int
    wall_s: float
    mean_return: float | None
    stop_reason: str
    """budget (total_env_steps; offline: algo.steps), wall_time (max_wall_s), signal, or
    stopped (a hook called `runner.request_stop()`)."""
    exit_code: int = 0
    """0, or 128 + signal number when a signal stopped the run."""
    summary: dict[str, Any] = field(default_factory=dict)
    """What summary.json holds."""
    problems: list[str] = field(default_factory=list)
    """What on_end hooks could not do (export, play, ...); the checkpoint is safe."""


class TrainHook:
    """Base class: every callback is a no-op."""

    name: str = "hook"
    """Profiler section of this hook's time."""
    handles: tuple[str, ...] = ()
    """Config keys this hook implements (the Runner notes set keys no hook handles)."""

    def on_start(self, runner: Runner) -> None:
        pass

    def on_iteration(self, runner: Runner, it: IterationInfo) -> None:
        pass

    def on_checkpoint(self, runner: Runner, path: Path) -> None:
        pass

    def on_end(self, runner: Runner, result: RunResult) -> None:
        pass

    def close(self) -> None:
        pass
