"""A run directory's policy: the actor from its newest good checkpoint, plus export metadata.

The checkpoint is self-contained: its `config` entry is the run's YAML config, so the
actor is rebuilt with the same algorithm settings and the task with the same task settings.
Nothing here touches the logger backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from torch import nn

import unilab
from unilab.config.compose import config_from_yaml
from unilab.config.schema import Config
from unilab.export.metadata import PolicyMetadata
from unilab.tasks.base import Task
from unilab.train.checkpoint import CheckpointError, load_latest_good


class RunDirError(ValueError):
    """A path that is not a usable run directory; the message says what is missing."""


@dataclass
class RunPolicy:
    actor: nn.Module
    """The actor in eval mode on the CPU; `actor(obs)` is the deterministic action."""
    config: Config
    metadata: PolicyMetadata
    checkpoint: Path
    skipped: list[str]
    """One message per newer checkpoint that could not be read."""


def load_run_policy(run_dir: Path) -> RunPolicy:
    import unilab.algos
    import unilab.tasks  # noqa: F401  (registers every task and algorithm)
    from unilab.algos.registry import ALGORITHMS

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"run directory not found: {run_dir}")
    try:
        path, state, skipped = load_latest_good(run_dir / "checkpoints", map_location="cpu")
    except CheckpointError as exc:
        raise RunDirError(f"{run_dir} has no usable checkpoint: {exc}") from None
    cfg = config_from_yaml(str(state["config"]))
    task = make_probe_task(cfg)
    entry = ALGORITHMS.get(cfg.algo.name)
    actor = entry.algo_cls.build_actor(cfg.algo, task.obs_dims, task.action_dim)
    actor.load_state_dict(state["algo"]["actor"])
    actor.eval()
    checkpoint = {
        "file": path.name,
        "iteration": int(state["iteration"]),
        "env_steps": int(state["env_steps"]),
    }
    meta = policy_metadata(task, cfg, checkpoint)
    return RunPolicy(actor, cfg, meta, path, skipped)


def make_probe_task(cfg: Config) -> Task:
    from unilab.tasks.registry import make_task

    return make_task(cfg.task, num_envs=1, seed=cfg.run.seed, sim_cfg=cfg.sim)


def policy_metadata(task: Task, cfg: Config, checkpoint: dict[str, Any]) -> PolicyMetadata:
    """Export metadata from a live task (its `metadata()` plus the robot spec's limits)."""
    base = task.metadata()
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


def example_input(meta: PolicyMetadata, batch: int = 2) -> torch.Tensor:
    return torch.zeros(batch, meta.obs_dim, dtype=torch.float32)
