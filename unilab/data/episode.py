"""One episode on its way into the store: metadata, and the check that turns user arrays
into exactly the schema's columns (or raises one clear error before anything is written)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from unilab.data.errors import EpisodeLengthError, SchemaMismatchError
from unilab.data.schema import ENUMS, StoreSchema

REQUIRED_CORE = ("reward", "terminated", "truncated", "origin")
"""Core columns an episode must give (scalars broadcast for `origin`)."""

CORE_DEFAULTS: dict[str, Any] = {
    "is_intervention": False,
    "policy_version": -1,
    "token": -1,
    "segment": "none",
}
"""Core columns that may be left out, with the value every frame then gets."""


@dataclass
class EpisodeMeta:
    """Per-episode metadata kept in the episode index. `tags` is free-form JSON."""

    task: str = ""
    language_instruction: str = ""
    success: bool | None = None
    seed: int | None = None
    robot: str = ""
    fps: float | None = None
    tags: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = asdict(self)
        try:
            return json.dumps(doc, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise SchemaMismatchError(
                f"episode metadata must be JSON-serializable (finite numbers, str, lists, "
                f"dicts): {exc}"
            ) from exc

    @classmethod
    def from_json(cls, text: str) -> EpisodeMeta:
        doc = json.loads(text)
        return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})

    @classmethod
    def coerce(cls, meta: EpisodeMeta | Mapping[str, Any] | None) -> EpisodeMeta:
        if meta is None:
            return cls()
        if isinstance(meta, EpisodeMeta):
            return meta
        unknown = set(meta) - set(cls.__dataclass_fields__)
        if unknown:
            raise SchemaMismatchError(
                f"unknown episode metadata keys {sorted(unknown)}; valid: "
                f"{sorted(cls.__dataclass_fields__)} (put anything else in 'tags')"
            )
        return cls(**dict(meta))


def encode_enum(column: str, value: Any, n: int) -> np.ndarray:
    """`origin`/`segment` given as a name, names, or codes -> (n,) uint8 codes."""
    names = ENUMS[column]
    if isinstance(value, str):
        if value not in names:
            raise SchemaMismatchError(f"{column} {value!r} is not one of {list(names)}")
        return np.full(n, names.index(value), dtype=np.uint8)
    arr = np.asarray(value)
    if arr.dtype.kind in "US":
        bad = sorted({str(v) for v in np.unique(arr)} - set(names))
        if bad:
            raise SchemaMismatchError(f"{column} values {bad} are not in {list(names)}")
        lookup = {name: i for i, name in enumerate(names)}
        codes = np.array([lookup[str(v)] for v in arr.reshape(-1)], dtype=np.uint8)
        return codes.reshape(arr.shape) if arr.ndim else np.full(n, codes[0], np.uint8)
    if arr.dtype.kind not in "iu":
        raise SchemaMismatchError(
            f"{column}: expected names from {list(names)} or integer codes, got dtype {arr.dtype}"
        )
    if arr.size and (arr.min() < 0 or arr.max() >= len(names)):
        raise SchemaMismatchError(
            f"{column} codes must be in [0, {len(names) - 1}] ({list(names)}); got "
            f"[{arr.min()}, {arr.max()}]"
        )
    return np.full(n, arr, np.uint8) if arr.ndim == 0 else arr.astype(np.uint8)


def cast_to_spec(name: str, arr: np.ndarray, want: np.dtype, spec_text: str) -> np.ndarray:
    """Cast within a kind (float64 obs -> float32 is fine); never across kinds."""
    got = arr.dtype
    if got == want:
        return arr
    if want.kind == "f" and got.kind in "fiu":
        return arr.astype(want)
    if want.kind in "iu" and got.kind in "iub":
        if np.can_cast(got, want, "safe"):
            return arr.astype(want)
        if arr.size:
            info = np.iinfo(want)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                raise SchemaMismatchError(
                    f"field {name!r}: expected {spec_text}; values [{lo}, {hi}] overflow {want}"
                )
        return arr.astype(want)
    if want.kind == "b" and got.kind == "b":
        return arr
    raise SchemaMismatchError(f"field {name!r}: expected {spec_text}, got dtype {got}")


def coerce_episode(
    schema: StoreSchema, frames: Mapping[str, Any], meta: EpisodeMeta
) -> dict[str, np.ndarray]:
    """Check `frames` against `schema` and return one contiguous array per schema field."""
    unknown = [k for k in frames if k not in schema.fields]
    if unknown:
        raise SchemaMismatchError(
            f"unknown field(s) {unknown}; the store's fields are {schema.names}"
        )
    required = [*schema.user_fields, *REQUIRED_CORE]
    if meta.fps is None:
        required.append("timestamp")
    missing = [k for k in required if k not in frames]
    if missing:
        hint = (
            " (timestamp may be left out when metadata gives fps)" if "timestamp" in missing else ""
        )
        raise SchemaMismatchError(f"episode is missing field(s) {missing}{hint}")

    arrays = {k: np.asarray(v) for k, v in frames.items() if k not in ("origin", "segment")}
    lengths = {k: (a.shape[0] if a.ndim else None) for k, a in arrays.items()}
    sized = {k: n for k, n in lengths.items() if n is not None}
    counts = set(sized.values())
    if len(counts) > 1:
        detail = ", ".join(f"{k}: {n}" for k, n in sized.items())
        raise EpisodeLengthError(f"episode fields disagree on the number of frames ({detail})")
    n = counts.pop() if counts else 0
    if n == 0:
        raise EpisodeLengthError("an episode needs at least one frame; got 0")

    out: dict[str, np.ndarray] = {}
    for name, spec in schema.fields.items():
        if name in ENUMS:
            value = frames.get(name, CORE_DEFAULTS.get(name))
            codes = encode_enum(name, value, n)
            if codes.shape != (n,):
                raise EpisodeLengthError(
                    f"episode fields disagree on the number of frames ({name}: {codes.shape[0]}, "
                    f"others: {n})"
                )
            out[name] = codes
            continue
        if name in arrays:
            arr = arrays[name]
        elif name == "timestamp":
            assert meta.fps is not None
            arr = np.arange(n, dtype=np.float64) / float(meta.fps)
        else:
            arr = np.asarray(CORE_DEFAULTS[name])
        if arr.ndim == 0 and name in CORE_DEFAULTS:
            arr = np.full(n, arr)
        spec_text = f"(n, {', '.join(map(str, spec.shape))}) {spec.dtype}".replace(", )", ")")
        if arr.shape[1:] != spec.shape or arr.ndim == 0:
            raise SchemaMismatchError(
                f"field {name!r}: expected {spec_text}, got shape {arr.shape} dtype {arr.dtype}"
            )
        out[name] = np.ascontiguousarray(cast_to_spec(name, arr, np.dtype(spec.dtype), spec_text))

    for flag in ("terminated", "truncated"):
        if out[flag][:-1].any():
            first = int(np.flatnonzero(out[flag][:-1])[0])
            raise SchemaMismatchError(
                f"{flag} is set at frame {first} of {n}: only an episode's last frame may end it"
            )
    if meta.fps is not None and not (math.isfinite(meta.fps) and meta.fps > 0):
        raise SchemaMismatchError(f"episode fps must be a positive number, got {meta.fps}")
    return out
