"""The policy side of the operator station, torch-free.

`HilPolicy` turns a policy function into one action per control tick. The function takes
the observation groups and returns an action (A,), an action chunk (H, A) that is then
executed open-loop for H ticks (a flow-matching VLA; `reset()` drops the rest of a chunk,
e.g. after a takeover), or a dict with "actions" and optionally "predicted_success".

`load_hil_policy(path)` loads an exported `policy.onnx` (or a run directory's
`export/policy.onnx`) with onnxruntime alone: today's MLP policies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unilab.export.metadata import PolicyMetadata

PolicyFn = Callable[[dict[str, np.ndarray]], Any]


class PolicyMismatchError(ValueError):
    """The policy does not fit the robot (observation or action sizes differ)."""


@dataclass
class PolicyStep:
    action: np.ndarray
    predicted_success: float | None = None


class HilPolicy:
    def __init__(
        self, fn: PolicyFn, *, metadata: PolicyMetadata | None = None, name: str = ""
    ) -> None:
        self.fn = fn
        self.metadata = metadata
        self.name = name
        self._queue: deque[np.ndarray] = deque()
        self._success: float | None = None

    def reset(self) -> None:
        self._queue.clear()

    def __call__(self, obs: dict[str, np.ndarray]) -> PolicyStep:
        if not self._queue:
            out = self.fn(obs)
            success = None
            if isinstance(out, dict):
                success = out.get("predicted_success")
                out = out["actions"]
            actions = np.asarray(out, dtype=np.float32)
            if actions.ndim == 1:
                actions = actions[None]
            self._queue.extend(actions)
            self._success = None if success is None else float(np.asarray(success).reshape(-1)[0])
        return PolicyStep(self._queue.popleft(), self._success)

    def check_robot(self, robot: dict[str, Any]) -> None:
        """Raise `PolicyMismatchError` unless the policy's sizes match the robot host's."""
        meta = self.metadata
        if meta is None:
            return
        n = len(robot["action_names"])
        if meta.action_dim != n:
            raise PolicyMismatchError(
                f"policy {self.name} outputs {meta.action_dim} actions; the robot takes {n} "
                f"({robot['action_names']})"
            )
        dims = robot["obs_dims"]
        if dims.get(meta.obs_group) != meta.obs_dim:
            raise PolicyMismatchError(
                f"policy {self.name} reads {meta.obs_group!r} of width {meta.obs_dim}; the "
                f"robot sends {dims}"
            )


def resolve_onnx(path: str | Path) -> Path:
    p = Path(path)
    for candidate in (p, p / "export" / "policy.onnx", p / "policy.onnx"):
        if candidate.is_file() and candidate.suffix == ".onnx":
            return candidate
    raise PolicyMismatchError(
        f"no policy.onnx at {p} (looked for the file, <run>/export/policy.onnx and "
        "<dir>/policy.onnx); export a run with `unilab export <run dir>`"
    )


def load_hil_policy(path: str | Path) -> HilPolicy:
    from unilab.deploy.onnx_policy import OnnxPolicy

    onnx_path = resolve_onnx(path)
    policy = OnnxPolicy(onnx_path)
    group = policy.metadata.obs_group

    def fn(obs: dict[str, np.ndarray]) -> np.ndarray:
        return policy(obs[group])

    return HilPolicy(fn, metadata=policy.metadata, name=str(onnx_path))
