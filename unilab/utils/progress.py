"""The progress bar of long runs: steps done, rate, one metric (RL: mean return; offline
training: the loss) and ETA; silent in quiet mode."""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class TrainingProgress:
    def __init__(
        self,
        total_steps: int,
        description: str,
        quiet: bool,
        unit: str = "steps/s",
        metric: str = "return",
    ) -> None:
        self.unit, self.metric = unit, metric
        self.quiet = quiet or not sys.stderr.isatty()
        self.console = Console(stderr=True)
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self.total = total_steps
        self.description = description

    def __enter__(self) -> TrainingProgress:
        if not self.quiet:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[sps]:>8} " + self.unit.replace("[", "\\[")),
                TextColumn(self.metric.replace("[", "\\[") + " {task.fields[ret]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self.description, total=self.total, sps="-", ret="-"
            )
        return self

    def update(self, steps: int, steps_per_s: float, mean_return: float | None) -> None:
        if self._progress is not None and self._task is not None:
            fmt = ".2f" if self.metric == "return" else ".4g"
            ret = "-" if mean_return is None else format(mean_return, fmt)
            self._progress.update(
                self._task, completed=min(steps, self.total), sps=f"{steps_per_s:,.0f}", ret=ret
            )

    def print(self, message: str) -> None:
        self.console.print(message, highlight=False)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()


class CollectProgress:
    """The progress bar of `unilab collect`: episodes kept of the target, success rate of
    the finished episodes, frames per second and ETA; silent in quiet mode."""

    def __init__(self, total: int, description: str, quiet: bool) -> None:
        self.quiet = quiet or not sys.stderr.isatty()
        self.console = Console(stderr=True)
        self.total = total
        self.description = description
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> CollectProgress:
        if not self.quiet:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("episodes, success {task.fields[success]}"),
                TextColumn("{task.fields[fps]:>7} frames/s"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self.description, total=self.total, success="-", fps="-"
            )
        return self

    def update(self, kept: int, success_rate: float | None, frames_per_s: float) -> None:
        if self._progress is not None and self._task is not None:
            rate = "-" if success_rate is None else f"{100 * success_rate:.0f} %"
            self._progress.update(
                self._task,
                completed=min(kept, self.total),
                success=rate,
                fps=f"{frames_per_s:,.0f}",
            )

    def print(self, message: str) -> None:
        self.console.print(message, highlight=False)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
