"""The task registry: a task is a `Task` subclass plus its config dataclass, under one name.

`TASKS` is the lazy registry object of `unilab.registry` (it imports `unilab.tasks`, and so
registers every task, on the first lookup); this module gives it its full entry type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from unilab import registry as _registry
from unilab.config.errors import ConfigError
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

    def reward_terms(self) -> list[str]:
        """Reward term names: the class's default weights and its `reward_<name>` methods."""
        methods = {n.removeprefix("reward_") for n in dir(self.task_cls) if n.startswith("reward_")}
        return sorted(methods | set(self.task_cls.default_reward_weights))

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The task's instruction words (id = index); () without instructions."""
        return tuple(self.task_cls.vocabulary)

    def check_config(self, cfg: Any) -> list[str]:
        """Reward weights must name reward terms of this task."""
        terms = self.reward_terms()
        return [
            f"task.reward_weights.{name}={weight!r}: unknown reward term(s) {name} for task "
            f"{cfg.name!r}; terms are {', '.join(terms) or '(none)'}"
            for name, weight in getattr(cfg, "reward_weights", {}).items()
            if name not in terms
        ]


TASKS = cast(Registry[TaskEntry], _registry.TASKS)

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


def check_task_builds(cfg: TaskConfig, sim_cfg: SimConfig | None = None, seed: int = 0) -> Task:
    """Build the configured task with one env and reset it; any error doing so becomes one
    `ConfigError` naming the task (the CLI prints it and exits 2). Call it before anything
    is written (run directory, processes): a task's own checks (a non-positive sigma, a bad
    model path) run in its constructor. Returns the probe task, for its shapes."""
    try:
        task = make_task(cfg, num_envs=1, seed=seed, sim_cfg=sim_cfg)
        task.reset()
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError, OSError) as exc:  # the task refused its config
        text = str(exc) or type(exc).__name__
        prefix = "" if text.startswith(f"task {cfg.name!r}") else f"task {cfg.name!r}: "
        raise ConfigError(prefix + text) from None
    except Exception as exc:  # a task's constructor is extensible code: still one message
        raise ConfigError(
            f"task {cfg.name!r} could not be built: {type(exc).__name__}: {exc}"
        ) from None
    return task
