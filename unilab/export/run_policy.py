"""A run directory's policy: the actor from its newest good checkpoint, plus export metadata.

The checkpoint is self-contained: its `config` entry is the run's YAML config, so the
actor is rebuilt with the same algorithm settings and the task with the same task settings.
Nothing here touches the logger backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

import unilab
from unilab.config.compose import config_from_yaml
from unilab.config.schema import Config
from unilab.export.metadata import PolicyMetadata
from unilab.runtime.torch_policy import PolicyModule
from unilab.tasks.base import Task
from unilab.utils.checkpoint import CheckpointError, load_checkpoint, load_latest_good


class RunDirError(ValueError):
    """A path that is not a usable run directory; the message says what is missing."""


@dataclass
class RunPolicy:
    actor: PolicyModule
    """The policy in eval mode on the CPU; `actor.act_inference(obs)` is what export writes."""
    config: Config
    metadata: PolicyMetadata
    checkpoint: Path
    skipped: list[str]
    """One message per newer checkpoint that could not be read."""
    vocabulary: tuple[str, ...] = ()
    """The task's instruction words (id = index), for policies that read instructions."""


def load_run_policy(run_dir: Path, checkpoint: Path | None = None) -> RunPolicy:
    """The policy of a run's newest good checkpoint, or of `checkpoint` (one of its files,
    e.g. an earlier one whose held-out loss was lowest)."""
    from unilab.algos.build import build_policy

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"run directory not found: {run_dir}")
    try:
        if checkpoint is None:
            path, state, skipped = load_latest_good(run_dir / "checkpoints", map_location="cpu")
        else:
            path, state, skipped = Path(checkpoint), load_checkpoint(Path(checkpoint)), []
    except CheckpointError as exc:
        raise RunDirError(f"{checkpoint or run_dir} has no usable checkpoint: {exc}") from None
    cfg = config_from_yaml(str(state["config"]))
    task = make_probe_task(cfg)
    try:
        actor = build_policy(cfg.algo, task, weights=state["algo"]["actor"])
    except ValueError as exc:
        raise RunDirError(f"{path}: {exc}") from None
    saved = {
        "file": path.name,
        "iteration": int(state["iteration"]),
        "env_steps": int(state["env_steps"]),
    }
    meta = policy_metadata(task, cfg, saved, actor)
    return RunPolicy(actor, cfg, meta, path, skipped, tuple(task.vocabulary))


def make_probe_task(cfg: Config) -> Task:
    from unilab.tasks.registry import make_task

    return make_task(cfg.task, num_envs=1, seed=cfg.run.seed, sim_cfg=cfg.sim)


def policy_metadata(
    task: Task, cfg: Config, checkpoint: dict[str, Any], policy: PolicyModule | None = None
) -> PolicyMetadata:
    """Export metadata from a live task (its `metadata()` plus the robot spec's limits) and
    the policy's graph signature (its observation groups and chunk length). A policy that
    also reads images and instruction ids (the VLA) has its graph inputs in its own record
    (`unilab.export.vla_metadata`); here its vector groups keep their names as inputs."""
    from unilab.export.onnx_export import graph_input_names

    groups = policy.obs_groups if policy is not None else ("policy",)
    base = task.metadata()
    vectors = [g for g in groups if g in base["obs_dims"]]
    inputs = graph_input_names(groups) if len(vectors) == len(groups) else {g: g for g in vectors}
    spec = task.robot
    names = getattr(task, "obs_names", None)
    obs_names = names() if callable(names) else names
    return PolicyMetadata(
        task=str(base["task"]),
        robot=str(base["robot"]),
        algorithm=str(cfg.algo.name),
        joint_names=[str(n) for n in base["joint_names"]],
        default_pose=[float(x) for x in base["default_pose"]],
        kp=[float(x) for x in base["kp"]],
        kd=[float(x) for x in base["kd"]],
        action_scale=float(base["action_scale"]),
        action_clip=float(task.action_clip),
        control_mode=str(spec.control_mode),
        control_dt=float(base["control_dt"]),
        joint_lower=[float(x) for x in spec.joint_lower],
        joint_upper=[float(x) for x in spec.joint_upper],
        obs_dims={str(k): int(v) for k, v in base["obs_dims"].items()},
        action_dim=int(task.action_dim),
        obs_group=vectors[0] if len(vectors) == 1 else "policy",
        input_groups=inputs,
        action_horizon=int(policy.action_horizon) if policy is not None else 1,
        obs_names={str(k): [str(n) for n in v] for k, v in (obs_names or {}).items()},
        task_config=_plain(cfg.task),
        sim_config=_plain(cfg.sim),
        checkpoint=dict(checkpoint),
        unilab_version=unilab.__version__,
    )


def _plain(section: Any) -> dict[str, Any]:
    container = OmegaConf.to_container(OmegaConf.structured(section), resolve=True)
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}
