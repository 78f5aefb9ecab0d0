"""Where `play` and `eval` get a policy: a run directory (torch, newest good checkpoint),
an exported `.onnx` (onnxruntime: an MLP policy, or a VLA with its chunk executor), or a
baseline (zero or uniform random actions).

Every one is a `unilab.runtime.policy.Policy[numpy.ndarray]` (numpy observation groups in,
an action chunk out), deterministic except for the random baseline, and runs through
`unilab.runtime.rollout.rollout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """A run directory, one of its checkpoints (`RUN/checkpoints/*.pt`), its export
    directory, or an `.onnx` file."""
    target = Path(target)
    if target.is_file():
        if target.suffix == ".pt" and target.parent.name == "checkpoints":
            return _checkpoint(target.parent.parent, target)
        if target.suffix != ".onnx":
            raise PolicyLoadError(
                f"{target} is not an .onnx file nor a run's checkpoints/*.pt; pass a run "
                "directory, one of its checkpoints or an exported policy.onnx"
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
    from unilab.deploy.onnx_session import is_vla, open_session

    session = open_session(path)
    if is_vla(session):
        from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy

        vla = OnnxVLAPolicy(path, session=session)
        if vla.robot is None:
            raise PolicyLoadError(
                f"{path} is a VLA exported without robot/task metadata; export the run with "
                "`unilab export RUN` to play or evaluate it in simulation"
            )
        return LoadedPolicy(vla, vla.robot, str(path))
    from unilab.deploy.onnx_policy import OnnxPolicy

    policy = OnnxPolicy(path, session=session)
    return LoadedPolicy(policy, policy.metadata, str(path))


def set_flow_steps(loaded: LoadedPolicy, steps: int) -> None:
    """Integrate a flow VLA's chunks in `steps` Euler steps instead of its trained K (the
    velocity field is the same at any K; from zero noise, fewer steps land nearer the
    mean action). Only a policy loaded from its run: an ONNX export has K in its graph."""
    from unilab.policies.vla.policy import VLAPolicy

    if steps < 1:
        raise PolicyLoadError(f"flow steps must be at least 1, got {steps}")
    inner = getattr(loaded.policy, "policy", None)  # a NumpyPolicy's torch policy
    if not isinstance(inner, VLAPolicy) or inner.head != "flow":
        raise PolicyLoadError(
            f"{loaded.source} is not a flow VLA loaded from its run: the number of flow steps "
            "applies to a bc_flow / awr_flow / flow_ppo run directory or checkpoint (an "
            "exported policy.onnx has its K in the graph: export again from the run)"
        )
    inner.num_steps = int(steps)


def check_fits(loaded: LoadedPolicy, task: Any) -> None:
    """A ValueError naming both sides unless `task` provides every observation group the
    policy reads, in the shape it reads it, and takes its action width."""
    meta, policy = loaded.metadata, loaded.policy
    spec = {k: tuple(v.shape) for k, v in task.observation_spec().items()}
    inner = getattr(policy, "policy", policy)  # a NumpyPolicy's torch policy
    shapes = dict(getattr(inner, "obs_shapes", None) or {})
    for group in policy.obs_groups:
        if group not in shapes and group in meta.obs_dims:
            shapes[group] = (int(meta.obs_dims[group]),)
    wrong = {g: s for g, s in shapes.items() if spec.get(g) != s}
    if wrong or task.action_dim != meta.action_dim:
        raise ValueError(
            f"policy expects observations {shapes} and {meta.action_dim} actions; task "
            f"{task.cfg.name!r} has {spec} and {task.action_dim}"
        )


def _checkpoint(run_dir: Path, checkpoint: Path | None = None) -> LoadedPolicy:
    from unilab.export.run_policy import RunDirError, load_run_policy
    from unilab.runtime.torch_policy import NumpyPolicy

    try:
        run = load_run_policy(run_dir, checkpoint)
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
