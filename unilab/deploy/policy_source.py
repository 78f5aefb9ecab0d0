"""Where `play` and `eval` get a policy: a run directory (torch, newest good checkpoint),
an exported `.onnx` (onnxruntime), or a baseline (zero or uniform random actions).

Every policy is a numpy function from (n, obs_dim) float32 observations to (n, action_dim)
float32 actions, deterministic except for the random baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unilab.export.metadata import PolicyMetadata

PolicyFn = Callable[[np.ndarray], np.ndarray]
POLICY_KINDS = ("trained", "zero", "random")


class PolicyLoadError(ValueError):
    """No policy at the given path, or an unknown policy kind."""


@dataclass
class LoadedPolicy:
    fn: PolicyFn
    metadata: PolicyMetadata
    source: str
    """What was loaded: the checkpoint or ONNX file."""
    kind: str = "trained"


def load_policy(target: Path) -> LoadedPolicy:
    """A run directory, its export directory, or an `.onnx` file."""
    target = Path(target)
    if target.is_file():
        if target.suffix != ".onnx":
            raise PolicyLoadError(
                f"{target} is not an .onnx file; pass a run directory or an exported policy.onnx"
            )
        return _onnx(target)
    if not target.is_dir():
        raise PolicyLoadError(f"no run directory or policy file at {target}")
    if (target / "checkpoints").is_dir():
        return _checkpoint(target)
    if (target / "policy.onnx").is_file():
        return _onnx(target / "policy.onnx")
    raise PolicyLoadError(
        f"{target} holds neither checkpoints/ (a run directory) nor policy.onnx (an export)"
    )


def _onnx(path: Path) -> LoadedPolicy:
    from unilab.deploy.onnx_policy import OnnxPolicy

    policy = OnnxPolicy(path)
    return LoadedPolicy(policy, policy.metadata, str(path))


def _checkpoint(run_dir: Path) -> LoadedPolicy:
    import torch

    from unilab.export.run_policy import RunDirError, load_run_policy

    try:
        run = load_run_policy(run_dir)
    except RunDirError as exc:
        raise PolicyLoadError(str(exc)) from None
    actor = run.actor

    def fn(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out: np.ndarray = actor(torch.from_numpy(np.asarray(obs, np.float32))).numpy()
        return out

    return LoadedPolicy(fn, run.metadata, str(run.checkpoint))


def baseline_policy(kind: str, base: LoadedPolicy, seed: int = 0) -> LoadedPolicy:
    """`zero` or `random` (uniform in ±action_clip) actions with `base`'s metadata."""
    meta = base.metadata
    if kind == "trained":
        return base
    if kind == "zero":

        def zero(obs: np.ndarray) -> np.ndarray:
            return np.zeros((obs.shape[0], meta.action_dim), np.float32)

        return LoadedPolicy(zero, meta, base.source, "zero")
    if kind == "random":
        rng = np.random.default_rng(seed)
        clip = meta.action_clip

        def random(obs: np.ndarray) -> np.ndarray:
            return rng.uniform(-clip, clip, (obs.shape[0], meta.action_dim)).astype(np.float32)

        return LoadedPolicy(random, meta, base.source, "random")
    raise PolicyLoadError(f"unknown policy kind {kind!r}; choose one of {', '.join(POLICY_KINDS)}")
