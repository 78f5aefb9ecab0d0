"""Failure states: the simulator state shortly before an episode failed, saved to disk, and
restored on demand.

`FailureStateRecorder` watches a rollout (`rollout(..., on_step=recorder)`): every `lag`
control steps it keeps each env's full state (`Task.save_env`), the newest two per env, and
when an env's first episode fails it writes the state from between `lag` and `2 * lag`
steps before the end as `<dir>/seed<S>_env<E>.npz` (`EnvState.save`: plain arrays, no
pickle). An episode fails when the task's `success` metric is 0 at its end, or, for a task
without one, when it ended by a termination reason rather than the time limit.

`restore_states(task, states)` is the one call that puts stored states back: env i gets
state i mod len(states) and continues from there (a targeted evaluation, or the start of
a recovery demonstration). `load_states(dir)` reads every state a recorder wrote.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unilab.runtime.rollout import SUCCESS_METRIC, StepInfo
from unilab.tasks.base import Task
from unilab.tasks.env_state import EnvState

INDEX = "index.json"
"""The recorder's list of written states, beside them: one row per state."""


@dataclass
class _Kept:
    state: EnvState
    step: int
    """The env's episode step when the state was saved."""


class FailureStateRecorder:
    """on_step hook for `rollout(..., one_per_env=True)`: saves each env's state every
    `lag` steps and writes the one about `before_s` seconds before a failed first episode."""

    def __init__(self, task: Task, out_dir: str | Path, seed: int, before_s: float = 1.0):
        if not math.isfinite(before_s) or before_s < 0:
            raise ValueError(f"before_s={before_s} must be a finite number of seconds >= 0")
        self.task, self.seed = task, int(seed)
        self.out_dir = Path(out_dir)
        self.lag = max(1, round(before_s / task.control_dt))
        n = task.num_envs
        self.newer: list[_Kept | None] = [None] * n
        self.older: list[_Kept | None] = [None] * n
        self.counted = np.zeros(n, dtype=bool)
        self.written: list[dict[str, Any]] = []
        """One row per state written: file, seed, env, state_step, end_step, reasons."""

    def _keep(self, env: int) -> None:
        self.older[env] = self.newer[env]
        self.newer[env] = _Kept(self.task.save_env(env), int(self.task.episode_step[env]))

    def _before_end(self, env: int, end: int) -> _Kept | None:
        newer, older = self.newer[env], self.older[env]
        if newer is not None and end - newer.step >= self.lag:
            return newer
        return older if older is not None else newer

    def __call__(self, info: StepInfo) -> None:
        out = info.result
        ended = out.terminated | out.truncated
        success = out.extras.get(SUCCESS_METRIC)
        # Without a success metric, a failure is an end by a termination, not the time limit.
        terminated = out.terminated & ~out.truncated
        failed = terminated if success is None else ended & (success < 0.5)
        for env in np.flatnonzero(ended & ~self.counted).tolist():
            self.counted[env] = True
            if failed[env]:
                self._write(env, int(out.episode_length[env]), out.reasons)
            self.newer[env] = self.older[env] = None
        for env in np.flatnonzero(~self.counted).tolist():
            kept = self.newer[env]
            if kept is None or int(self.task.episode_step[env]) - kept.step >= self.lag:
                self._keep(env)

    def _write(self, env: int, end: int, reasons: dict[str, np.ndarray]) -> None:
        kept = self._before_end(env, end)
        if kept is None:  # failed on its first step: nothing was saved before it
            return
        name = f"seed{self.seed}_env{env:04d}.npz"
        kept.state.save(self.out_dir / name)
        self.written.append(
            {
                "file": name,
                "seed": self.seed,
                "env": env,
                "state_step": kept.step,
                "end_step": end,
                "reasons": sorted(k for k, v in reasons.items() if v[env]),
            }
        )


def write_index(out_dir: str | Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """`<dir>/index.json`: what was recorded and how (task, before_s, source), atomically."""
    from unilab.utils.atomic import atomic_write_text

    path = Path(out_dir) / INDEX
    atomic_write_text(path, json.dumps({**meta, "states": rows}, indent=2) + "\n")
    return path


def load_states(path: str | Path) -> list[EnvState]:
    """Every state in a recorder's directory (in its index's order), or one `.npz` file."""
    path = Path(path)
    if path.is_file():
        return [EnvState.load(path)]
    if not path.is_dir():
        raise FileNotFoundError(f"no env state file or directory at {path}")
    index = path / INDEX
    if index.is_file():
        names = [row["file"] for row in json.loads(index.read_text())["states"]]
    else:
        names = sorted(p.name for p in path.glob("*.npz"))
    if not names:
        raise ValueError(
            f"{path} holds no env states (*.npz); record some with eval --save-failures"
        )
    return [EnvState.load(path / name) for name in names]


def restore_states(task: Task, states: list[EnvState]) -> dict[str, np.ndarray]:
    """Put `states` into the envs of `task`, env i from state i mod len(states); returns
    the observation groups of every env, ready for `rollout(task, policy, obs=...)`."""
    if not states:
        raise ValueError("restore_states needs at least one env state")
    obs: dict[str, np.ndarray] = {}
    for env in range(task.num_envs):
        obs = task.restore_env(env, states[env % len(states)])
    return obs
