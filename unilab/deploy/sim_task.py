"""Rebuild the task a policy was trained on from its export metadata, without torch.

`unilab.config.compose` imports the algorithms (and torch) to resolve algorithm configs;
a deployment needs only the task section, which OmegaConf validates against the task's
registered config dataclass directly.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from unilab.config.errors import ConfigError
from unilab.config.schema import SimConfig, TaskConfig
from unilab.tasks.base import Task


def task_config_from_dict(data: dict[str, Any]) -> TaskConfig:
    from unilab.tasks.registry import TASKS

    name = str(data.get("name", ""))
    if name not in TASKS:
        raise ConfigError(TASKS.unknown_message(name))
    entry = TASKS.get(name)
    try:
        node = OmegaConf.merge(OmegaConf.structured(entry.config_cls(name=name)), data)
        cfg = OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"task config for {name!r} does not fit its schema: {exc}") from None
    assert isinstance(cfg, TaskConfig)
    return cfg


def sim_config_from_dict(data: dict[str, Any]) -> SimConfig:
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SimConfig()), data))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"sim config does not fit its schema: {exc}") from None
    assert isinstance(cfg, SimConfig)
    return cfg


def make_task_from_dicts(
    task: dict[str, Any], sim: dict[str, Any], num_envs: int, seed: int
) -> Task:
    from unilab.tasks.registry import make_task

    return make_task(
        task_config_from_dict(task), num_envs=num_envs, seed=seed, sim_cfg=sim_config_from_dict(sim)
    )


def configs_for_policy(
    task: dict[str, Any], sim: dict[str, Any], overrides: list[str]
) -> tuple[TaskConfig, SimConfig]:
    """The policy's task and sim sections with `task.*` / `sim.*` key=value overrides.

    Without overrides this stays torch-free; with them it goes through `compose` for the
    same validation and messages as `unilab train`.
    """
    if not overrides:
        return task_config_from_dict(task), sim_config_from_dict(sim)
    bad = [t for t in overrides if not t.split("=", 1)[0].startswith(("task.", "sim."))]
    if bad:
        raise ConfigError(
            f"only task.* and sim.* overrides apply here (the policy is fixed); got {bad}"
        )
    from unilab.config.compose import compose

    cfg = compose(list(overrides), base={"task": dict(task), "sim": dict(sim)})
    return cfg.task, cfg.sim
