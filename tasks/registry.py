"""The task registry: a task is a `Task` subclass plus its config dataclass, under one name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from unilab.config.schema import SimConfig, TaskConfig
from unilab.registry import Registry

if TYPE_CHECKING:
    from unilab.tasks.base import Task


@dataclass(frozen=True)
class TaskEntry:
    task_cls: type[Task]
    config_cls: type[TaskConfig]
    default_algo: str
    description: str


TASKS: Registry[TaskEntry] = Registry("task")

TaskT = TypeVar("TaskT", bound="type[Task]")


def register_task(
    name: str, config_cls: type[TaskConfig], default_algo: str = "ppo"
) -> Callable[[TaskT], TaskT]:
    """Class decorator: `@register_task("arm_reach", ArmReachConfig)`."""

    def decorator(task_cls: TaskT) -> TaskT:
        doc = (task_cls.__doc__ or "").strip().splitlines()
        TASKS.add(name, TaskEntry(task_cls, config_cls, default_algo, doc[0] if doc else ""))
        return task_cls

    return decorator


def make_task(
    cfg: TaskConfig,
    num_envs: int,
    seed: int = 0,
    nthread: int = 1,
    sim_cfg: SimConfig | None = None,
) -> Task:
    """Instantiate the registered task named by `cfg.name`."""
    entry = TASKS.get(cfg.name)
    if not isinstance(cfg, entry.config_cls):
        raise TypeError(
            f"task {cfg.name!r} expects a {entry.config_cls.__name__}, got {type(cfg).__name__}"
        )
    return entry.task_cls(cfg, num_envs=num_envs, seed=seed, nthread=nthread, sim_cfg=sim_cfg)
