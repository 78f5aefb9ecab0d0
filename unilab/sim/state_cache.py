"""`@per_sim_state`: a method of a task computed once per physics state.

Observations, reward terms and terminations ask for the same derived arrays (gravity in
the base frame, joint positions, contacts) several times a step. A decorated method's
result is kept until `self.sim.state_version` changes (`BatchedSim` bumps it on every step,
reset, restore and push), so nothing stale is ever served. Results are shared: callers
treat them as read-only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


def per_sim_state(method: Callable[[Any], R]) -> Callable[[Any], R]:
    name = method.__name__

    @functools.wraps(method)
    def cached(self: Any) -> R:
        version = self.sim.state_version
        store: dict[str, tuple[int, Any]] = self.__dict__.setdefault("_per_sim_state", {})
        hit = store.get(name)
        if hit is not None and hit[0] == version:
            result: R = hit[1]
            return result
        value = method(self)
        store[name] = (version, value)
        return value

    return cached
