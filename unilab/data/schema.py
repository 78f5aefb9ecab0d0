"""The store schema: which per-frame fields a store holds, their shape per frame and dtype.

A schema is fixed when a store is created and saved in the store's root attributes; every
append is checked against it. User fields are observation groups (`obs/<group>`), camera
images (`images/<camera>`, uint8 H×W×C) and `action`; the core per-frame columns below are
added to every schema so that all stores can be mixed by the same learners.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from unilab.data.errors import SchemaMismatchError

ORIGINS: tuple[str, ...] = ("sim", "real", "human", "wm")
"""`origin` codes: index in this tuple is the stored uint8."""
INTERVENED_TAG = "intervened"
"""Episode tag: a takeover drove some of its frames (its `success` is then the policy's)."""
TASK_SUCCESS_TAG = "task_success"
"""Episode tag of an intervened episode: the task's own outcome (was it rescued?)."""
SCENE_TAG = "scene"
"""Episode tag: where the episode started. Episodes with equal values started from the same
scene (the first episode of one env slot in one-per-env plays with the same seed, env count
and task), so their outcomes differ only by what the policy did."""

SEGMENTS: tuple[str, ...] = ("none", "progress", "idle", "failure", "recovery")
"""`segment` codes: index in this tuple is the stored uint8."""

ENUMS: dict[str, tuple[str, ...]] = {"origin": ORIGINS, "segment": SEGMENTS}

DURABLE_ORIGINS: tuple[str, ...] = ("real", "human")
"""Origins that cannot be recorded again: appends holding them are fsynced by default."""

ALLOWED_DTYPES = (
    "bool",
    "uint8",
    "uint16",
    "uint32",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
)

# Chunk sizing (measured, docs/decisions/0005): zarr's cost is mostly per chunk, so chunks
# of ~256 KiB beat one-frame chunks even for random image reads, while keeping the
# read-modify-write of a boundary chunk cheap for small appends. Large images get 1 frame.
IMAGE_CHUNK_BYTES = 256 * 1024
VECTOR_CHUNK_BYTES = 256 * 1024
MAX_CHUNK_FRAMES = 65536

_NAME = re.compile(r"^[a-z][a-z0-9_]*(/[a-z0-9_]+)?$")
RESERVED_PREFIXES = ("episode_index",)


@dataclass(frozen=True)
class FieldSpec:
    """One per-frame field: `shape` is the shape of a single frame, `chunk_frames` the number
    of frames per stored chunk (chosen from the frame size when left out)."""

    shape: tuple[int, ...]
    dtype: str
    chunk_frames: int | None = None

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        if any(s <= 0 for s in shape):
            raise SchemaMismatchError(f"field shape {shape} has a non-positive dimension")
        dtype = np.dtype(self.dtype).name
        if dtype not in ALLOWED_DTYPES:
            raise SchemaMismatchError(
                f"dtype {self.dtype!r} is not supported; use one of {', '.join(ALLOWED_DTYPES)}"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        if self.chunk_frames is not None and int(self.chunk_frames) < 1:
            raise SchemaMismatchError(f"chunk_frames must be >= 1, got {self.chunk_frames}")

    @property
    def frame_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    @property
    def is_image(self) -> bool:
        return len(self.shape) == 3 and self.dtype == "uint8"

    def resolved(self) -> FieldSpec:
        """This spec with `chunk_frames` filled in."""
        if self.chunk_frames is not None:
            return self
        target = IMAGE_CHUNK_BYTES if self.is_image else VECTOR_CHUNK_BYTES
        frames = max(1, min(MAX_CHUNK_FRAMES, target // max(1, self.frame_bytes)))
        return FieldSpec(self.shape, self.dtype, frames)

    def describe(self) -> str:
        return f"shape-per-frame {self.shape} dtype {self.dtype}"

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "chunk_frames": self.chunk_frames}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FieldSpec:
        return cls(tuple(doc["shape"]), str(doc["dtype"]), doc.get("chunk_frames"))


CORE_FIELDS: dict[str, FieldSpec] = {
    "reward": FieldSpec((), "float32"),
    "terminated": FieldSpec((), "bool"),
    "truncated": FieldSpec((), "bool"),
    "timestamp": FieldSpec((), "float64"),
    "origin": FieldSpec((), "uint8"),
    "is_intervention": FieldSpec((), "bool"),
    "policy_version": FieldSpec((), "int64"),
    "token": FieldSpec((), "int32"),
    "segment": FieldSpec((), "uint8"),
}
"""Per-frame columns every store has, beside the user's observation/image/action fields."""


def _as_shape(value: int | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    return (int(value),) if isinstance(value, int | np.integer) else tuple(int(v) for v in value)


class StoreSchema:
    """Field name -> `FieldSpec`, for the user fields plus `CORE_FIELDS`.

    Build one with `StoreSchema.build(obs=..., action=..., images=...)` or pass a mapping of
    user fields (`obs/<group>`, `images/<camera>`, `action`, other lower-case names).
    """

    def __init__(self, fields: Mapping[str, FieldSpec]) -> None:
        merged: dict[str, FieldSpec] = {}
        for name, spec in fields.items():
            if not isinstance(spec, FieldSpec):
                raise SchemaMismatchError(f"field {name!r}: expected a FieldSpec, got {spec!r}")
            if not _NAME.match(name) or name.split("/")[0] in RESERVED_PREFIXES:
                raise SchemaMismatchError(
                    f"field name {name!r} is not valid: use lower-case `name` or `group/name` "
                    f"(letters, digits, _), not starting with {RESERVED_PREFIXES}"
                )
            core = CORE_FIELDS.get(name)
            if core is not None and (core.shape, core.dtype) != (spec.shape, spec.dtype):
                raise SchemaMismatchError(
                    f"field {name!r} is a core column with {core.describe()}; got {spec.describe()}"
                )
            merged[name] = spec.resolved()
        if "action" not in merged:
            raise SchemaMismatchError("a store schema needs an 'action' field")
        if not any(n.startswith(("obs/", "images/")) for n in merged):
            raise SchemaMismatchError(
                "a store schema needs at least one 'obs/<group>' or 'images/<camera>' field"
            )
        for name, spec in merged.items():
            if name.startswith("images/") and not spec.is_image:
                raise SchemaMismatchError(
                    f"image field {name!r} must be uint8 with shape (H, W, C); got {spec.describe()}"
                )
        for name, spec in CORE_FIELDS.items():
            merged.setdefault(name, spec.resolved())
        self.fields: dict[str, FieldSpec] = merged

    @classmethod
    def build(
        cls,
        *,
        obs: Mapping[str, int | tuple[int, ...]],
        action: int | tuple[int, ...],
        images: Mapping[str, tuple[int, int] | tuple[int, int, int]] | None = None,
        obs_dtype: str = "float32",
        action_dtype: str = "float32",
        extra: Mapping[str, FieldSpec] | None = None,
    ) -> StoreSchema:
        """Schema from observation group sizes, action size and camera (H, W[, C]) shapes."""
        fields: dict[str, FieldSpec] = {
            f"obs/{g}": FieldSpec(_as_shape(s), obs_dtype) for g, s in obs.items()
        }
        for cam, hw in (images or {}).items():
            shape = tuple(hw) if len(hw) == 3 else (*tuple(hw), 3)
            fields[f"images/{cam}"] = FieldSpec(shape, "uint8")
        fields["action"] = FieldSpec(_as_shape(action), action_dtype)
        fields.update(extra or {})
        return cls(fields)

    @property
    def names(self) -> list[str]:
        return list(self.fields)

    @property
    def user_fields(self) -> list[str]:
        return [n for n in self.fields if n not in CORE_FIELDS]

    @property
    def observation_fields(self) -> list[str]:
        return [n for n in self.fields if n.startswith(("obs/", "images/"))]

    def to_json(self) -> dict[str, Any]:
        return {name: spec.to_json() for name, spec in self.fields.items()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StoreSchema:
        return cls({name: FieldSpec.from_json(spec) for name, spec in doc.items()})

    def differences(self, other: StoreSchema) -> list[str]:
        """Human-readable differences (ignoring chunking), empty when the schemas agree."""
        out = []
        for name in sorted(set(self.fields) | set(other.fields)):
            a, b = self.fields.get(name), other.fields.get(name)
            if a is None or b is None:
                where = "store" if a is None else "given schema"
                out.append(f"field {name!r} is missing from the {where}")
            elif (a.shape, a.dtype) != (b.shape, b.dtype):
                out.append(f"field {name!r}: store has {a.describe()}, given {b.describe()}")
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreSchema) and not self.differences(other)

    def __hash__(self) -> int:
        return hash(tuple((n, s.shape, s.dtype) for n, s in sorted(self.fields.items())))

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}: {s.shape} {s.dtype}" for n, s in self.fields.items())
        return f"StoreSchema({inner})"


def fill_value_for(dtype: str) -> Any:
    """The fill value of a stored array: NaN for floats and an out-of-range sentinel for
    integers, so a chunk that was never written does not read back as plausible zeros."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return float("nan")
    if dt.kind == "i":
        return int(np.iinfo(dt).min)
    if dt.kind == "u":
        return int(np.iinfo(dt).max)
    return False
