"""What a `Runner` delegates to: the loop that turns data into learner updates.

The Runner owns everything a run shares whatever its data (device, seeds, the task probe,
the algorithm, the run directory and its lock, config.yaml, checkpoints and resume,
metrics.jsonl + TensorBoard, the progress bar, stop signals, the summary files, the
hooks). A loop owns where batches come from and what one iteration is:

- `RolloutLoop` (`unilab.train.rollout_loop`): sim worker processes, the shared-memory
  ring, weight publishing; an iteration is one batch of chunks (RL algorithms).
- `OfflineLoop` (`unilab.train.offline_loop`): an episode store's frames; an iteration is
  one gradient step (offline algorithms: `Algorithm.offline`, bc_flow / bc_mse).

docs/decisions/0042-offline-runner.md says why the split runs along this line.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unilab.runtime.signals import StopSignal
from unilab.utils.progress import TrainingProgress

if TYPE_CHECKING:
    from unilab.train.hooks import RunResult
    from unilab.train.runner import Runner


class TrainLoop(abc.ABC):
    """One kind of training loop; a Runner holds one and calls these in this order:
    `learner_threads`, `check_inputs` (before any file is written), `resumed` (with
    `resume=`), `prepare` (before the hooks' on_start), `run`, `finish` (always), then
    `summary`. `checkpoint_state` and `after_checkpoint` run around every checkpoint."""

    progress_total: int
    """What the progress bar counts up to."""
    progress_unit: str = "steps/s"
    progress_metric: str = "return"
    """Name of the value the progress bar shows beside the rate."""
    step_key: str = "env_steps"
    """The x axis of metrics.jsonl rows and TensorBoard scalars."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    @abc.abstractmethod
    def learner_threads(self, cpu_count: int) -> int:
        """torch intra-op threads of a CPU learner when `runtime.learner_threads` is 0."""

    def check_inputs(self) -> None:
        """Raise a ConfigError for unusable inputs; runs before anything is written."""
        return None

    def resumed(self, path: Path, state: dict[str, Any]) -> None:
        """A checkpoint was loaded into the algorithm and the Runner's counters (notes)."""
        return None

    def prepare(self) -> None:
        """Build what hooks may look at in their on_start (e.g. the runtime)."""
        return None

    @abc.abstractmethod
    def run(self, bar: TrainingProgress, stop: StopSignal) -> str:
        """Iterate until the budget, the wall-time limit, a stop signal or a stop request;
        -> the stop reason (budget, wall_time, stopped; the Runner says signal)."""

    def finish(self) -> None:
        """Release what `prepare`/`run` started (always called, also after an error)."""
        return None

    @abc.abstractmethod
    def summary(self, result: RunResult, wall: float) -> tuple[dict[str, Any], str]:
        """(summary.json's content, summary.txt's opening lines: the result, and for RL
        the time split)."""

    def checkpoint_state(self) -> dict[str, Any]:
        """Entries this loop adds to every checkpoint."""
        return {}

    def after_checkpoint(self) -> None:
        """Runs after each checkpoint is written (e.g. prune state files of old ones)."""
        return None
