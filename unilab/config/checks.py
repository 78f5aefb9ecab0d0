"""Declarative value checks for config dataclass fields, run by `compose` before anything starts.

A field states its valid range where it is declared:

    checkpoint_every: int = checked(50, ge=1)
    mode: str = checked("sync", choices=("sync", "async"))

and `config_problems(cfg)` walks a composed config and returns one line per bad value, naming
the dotted key, the value and what would be valid. Every float anywhere (also in lists and
dicts) must be finite. A config dataclass may add checks across its fields with a method
`problems(self) -> list[str]` (messages without the section prefix; it is added).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CHECK_KEY = "unilab.check"


@dataclass(frozen=True)
class Check:
    """Bounds (inclusive ge/le, exclusive gt/lt) and/or a set of allowed values."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None

    def describe(self) -> str:
        parts = []
        if self.choices is not None:
            parts.append("one of " + ", ".join(repr(c) for c in self.choices))
        for op, bound in ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt)):
            if bound is not None:
                parts.append(f"{op} {bound:g}")
        return " and ".join(parts)

    def accepts(self, value: Any) -> bool:
        if value is None:
            return True  # optional fields: None means "off"; the type says whether it may be
        if self.choices is not None and value not in self.choices:
            return False
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.ge is not None and not value >= self.ge:
                return False
            if self.gt is not None and not value > self.gt:
                return False
            if self.le is not None and not value <= self.le:
                return False
            if self.lt is not None and not value < self.lt:
                return False
        return True


def checked(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Sequence[Any] | None = None,
) -> Any:
    """A dataclass field whose value `compose` checks: `checked(50, ge=1)`."""
    check = Check(ge, gt, le, lt, tuple(choices) if choices is not None else None)
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={CHECK_KEY: check}
    )


def field_check(cls: type, name: str) -> Check | None:
    """The check declared for field `name` by `cls` or, when a subclass redeclares the field
    only to change its default, by the nearest base class that declares one."""
    for klass in cls.__mro__:
        f = getattr(klass, "__dataclass_fields__", {}).get(name)
        check = f.metadata.get(CHECK_KEY) if f is not None else None
        if isinstance(check, Check):
            return check
    return None


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list | tuple):
        return any(_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    return False


def config_problems(obj: Any, prefix: str = "") -> list[str]:
    """Every bad value in a config dataclass tree, one readable line each."""
    problems: list[str] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            problems += config_problems(value, key + ".")
            continue
        if _non_finite(value):
            problems.append(f"{key}={value!r} is not finite")
            continue
        check = field_check(type(obj), f.name)
        if check is not None and not check.accepts(value):
            problems.append(f"{key}={value!r} must be {check.describe()}")
    own = getattr(obj, "problems", None)
    if callable(own):
        problems += [f"{prefix}{p}" if prefix else p for p in own()]
    return problems
