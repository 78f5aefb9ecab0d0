"""What one ring chunk holds: named fields, each a shape per step per env and a dtype."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

PlainSpec = tuple[tuple[str, tuple[int, ...], str], ...]
"""(name, shape, dtype string) per field: what crosses a process boundary."""


@dataclass(frozen=True)
class FieldSpec:
    shape: tuple[int, ...]
    """Shape of one step of one env (() for a scalar such as a reward)."""
    dtype: np.dtype

    @property
    def bytes_per_step_env(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class ChunkSpec(Mapping[str, FieldSpec]):
    """Field name -> (shape per step per env, dtype); float arrays and uint8 images alike.

    ``ChunkSpec({"obs": ((48,), np.float32), "rgb": ((64, 64, 3), np.uint8), "reward": ((), "f4")})``
    """

    def __init__(self, fields: Mapping[str, Any]) -> None:
        if not fields:
            raise ValueError("a ChunkSpec needs at least one field")
        self._fields: dict[str, FieldSpec] = {}
        for name, entry in fields.items():
            self._fields[name] = _parse_field(name, entry)

    @classmethod
    def from_plain(cls, plain: PlainSpec) -> ChunkSpec:
        return cls({name: (shape, dtype) for name, shape, dtype in plain})

    def to_plain(self) -> PlainSpec:
        return tuple((n, f.shape, f.dtype.str) for n, f in self._fields.items())

    @property
    def bytes_per_step_env(self) -> int:
        return sum(f.bytes_per_step_env for f in self._fields.values())

    def __getitem__(self, name: str) -> FieldSpec:
        return self._fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}: {f.shape} {f.dtype}" for n, f in self._fields.items())
        return f"ChunkSpec({inner})"


def _parse_field(name: str, entry: Any) -> FieldSpec:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"field name must be an identifier string, got {name!r}")
    if isinstance(entry, FieldSpec):
        return entry
    try:
        shape_in, dtype_in = entry
    except (TypeError, ValueError):
        raise ValueError(
            f"field {name!r}: expected (shape, dtype) such as ((48,), 'float32'), got {entry!r}"
        ) from None
    shape = (int(shape_in),) if isinstance(shape_in, int | np.integer) else tuple(shape_in)
    if not all(isinstance(d, int | np.integer) and d > 0 for d in shape):
        raise ValueError(f"field {name!r}: shape dims must be positive ints, got {shape_in!r}")
    try:
        dtype = np.dtype(dtype_in)
    except TypeError:
        raise ValueError(f"field {name!r}: {dtype_in!r} is not a numpy dtype") from None
    if dtype.kind not in "fiub" or dtype.hasobject:
        raise ValueError(
            f"field {name!r}: dtype {dtype} is not supported; use a float, int, uint or bool dtype"
        )
    return FieldSpec(tuple(int(d) for d in shape), dtype)
