"""The algorithm registry: an algorithm is one file in `unilab/algos/` plus its config.

`ALGORITHMS` is the lazy registry object of `unilab.registry` (it imports `unilab.algos`,
and so registers every algorithm, on the first lookup); this module gives it its full entry
type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from unilab import registry as _registry
from unilab.algos.base import Algorithm
from unilab.config.schema import AlgoConfig
from unilab.registry import Registry


@dataclass(frozen=True)
class AlgoEntry:
    algo_cls: type[Algorithm]
    config_cls: type[AlgoConfig]
    description: str

    @property
    def off_policy(self) -> bool:
        """Learns from a replay store (the class says so: `Algorithm.off_policy`)."""
        return bool(self.algo_cls.off_policy)

    def check_config(self, cfg: Any) -> list[str]:
        return []


ALGORITHMS = cast(Registry[AlgoEntry], _registry.ALGORITHMS)

AlgoT = TypeVar("AlgoT", bound=type[Algorithm])


def register_algo(name: str, config_cls: type[AlgoConfig]) -> Callable[[AlgoT], AlgoT]:
    """Class decorator: `@register_algo("ppo", PPOConfig)`. Whether an algorithm is
    off-policy is its class attribute `Algorithm.off_policy`."""

    def decorator(algo_cls: AlgoT) -> AlgoT:
        doc = (algo_cls.__doc__ or "").strip().splitlines()
        ALGORITHMS.add(name, AlgoEntry(algo_cls, config_cls, doc[0] if doc else ""))
        return algo_cls

    return decorator
