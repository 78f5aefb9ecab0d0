"""The algorithm registry: an algorithm is one file in `unilab/algos/` plus its config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from unilab.algos.base import Algorithm
from unilab.config.schema import AlgoConfig
from unilab.registry import Registry


@dataclass(frozen=True)
class AlgoEntry:
    algo_cls: type[Algorithm]
    config_cls: type[AlgoConfig]
    off_policy: bool
    description: str


ALGORITHMS: Registry[AlgoEntry] = Registry("algorithm")

AlgoT = TypeVar("AlgoT", bound=type[Algorithm])


def register_algo(
    name: str, config_cls: type[AlgoConfig], off_policy: bool = False
) -> Callable[[AlgoT], AlgoT]:
    def decorator(algo_cls: AlgoT) -> AlgoT:
        doc = (algo_cls.__doc__ or "").strip().splitlines()
        ALGORITHMS.add(name, AlgoEntry(algo_cls, config_cls, off_policy, doc[0] if doc else ""))
        return algo_cls

    return decorator
