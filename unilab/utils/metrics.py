"""Metrics sinks: one JSON line per logged iteration, and TensorBoard scalars."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class MetricsLogger:
    """`step_key` names the x axis in each JSON line (env_steps for RL runs, step for
    offline training); TensorBoard takes the same number as its global step."""

    def __init__(
        self, jsonl: Path | None, tensorboard: Path | None, step_key: str = "env_steps"
    ) -> None:
        self.step_key = step_key
        self._file = jsonl.open("a", buffering=1) if jsonl else None
        self._tb: Any = None
        if tensorboard is not None:
            from torch.utils.tensorboard import SummaryWriter  # heavy import; only when asked

            self._tb = SummaryWriter(str(tensorboard))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: float(v) for k, v in metrics.items() if v is not None}
        if self._file is not None:
            row = {
                self.step_key: step,
                **{k: (v if math.isfinite(v) else None) for k, v in clean.items()},
            }
            self._file.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for key, value in clean.items():
                if math.isfinite(value):
                    self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]
