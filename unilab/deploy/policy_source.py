"""Where `play` and `eval` get a policy: a run directory (torch, newest good checkpoint),
an exported `.onnx` (onnxruntime), or a baseline (zero or uniform random actions).

Every one is a `unilab.runtime.policy.Policy[numpy.ndarray]` (numpy observation groups in,
an action chunk out), deterministic except for the random baseline, and runs through
`unilab.runtime.rollout.rollout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unilab.export.metadata import PolicyMetadata
from unilab.runtime.policy import ActionChunk, Policy

POLICY_KINDS = ("trained", "zero", "random")


class PolicyLoadError(ValueError):
    """No policy at the given path, or an unknown policy kind."""


@dataclass
class LoadedPolicy:
    policy: Policy[np.ndarray]
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
    from unilab.export.run_policy import RunDirError, load_run_policy
    from unilab.runtime.torch_policy import NumpyPolicy

    try:
        run = load_run_policy(run_dir)
    except RunDirError as exc:
        raise PolicyLoadError(str(exc)) from None
    return LoadedPolicy(NumpyPolicy(run.actor), run.metadata, str(run.checkpoint))


class ConstantBaseline:
    """`Policy[np.ndarray]`: zero actions, or uniform in ±`clip` (seeded) when `random`."""

    action_horizon = 1

    def __init__(self, meta: PolicyMetadata, random: bool, seed: int = 0) -> None:
        self.meta = meta
        self.random = random
        self.rng = np.random.default_rng(seed)

    @property
    def obs_groups(self) -> tuple[str, ...]:
        return (self.meta.obs_group,)

    @property
    def action_dim(self) -> int:
        return self.meta.action_dim

    def act_inference(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        n = len(obs[self.meta.obs_group])
        shape = (n, 1, self.meta.action_dim)
        if not self.random:
            return np.zeros(shape, np.float32)
        clip = self.meta.action_clip
        return self.rng.uniform(-clip, clip, shape).astype(np.float32)

    def act(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = False
    ) -> ActionChunk[np.ndarray]:
        return ActionChunk(self.act_inference(obs))


def baseline_policy(kind: str, base: LoadedPolicy, seed: int = 0) -> LoadedPolicy:
    """`zero` or `random` (uniform in ±action_clip) actions with `base`'s metadata."""
    meta = base.metadata
    if kind == "trained":
        return base
    if kind in ("zero", "random"):
        return LoadedPolicy(ConstantBaseline(meta, kind == "random", seed), meta, base.source, kind)
    raise PolicyLoadError(f"unknown policy kind {kind!r}; choose one of {', '.join(POLICY_KINDS)}")
