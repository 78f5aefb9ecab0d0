"""The domain-randomization section of a task config: ranges drawn per env at each reset.

It lives in the config layer (the task config holds it); `unilab.sim.randomization` applies it
to a `mujoco.batch.Batch`. What each range means is documented there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

Range = tuple[float, float]

_RANGE_FIELDS = (
    "friction_scale",
    "mass_scale",
    "mass_add",
    "com_offset",
    "actuator_gain_scale",
    "joint_damping_scale",
)
# Lower bounds each range must respect, so a drawn value is physical.
_RANGE_MIN = {
    "friction_scale": (0.0, False),  # (bound, inclusive)
    "mass_scale": (0.0, False),
    "actuator_gain_scale": (0.0, False),
    "joint_damping_scale": (0.0, True),
}


@dataclass(frozen=True)
class DomainRandomization:
    """Ranges (low, high) drawn uniformly at each reset; None turns a term off (the default).

    The *_geoms/_bodies/_actuators/_joints fields select objects by name; None selects all
    (for masses: all bodies with a positive mass; for COM: all non-simple ones).
    """

    friction_scale: Range | None = None
    friction_geoms: tuple[str, ...] | None = None
    mass_scale: Range | None = None
    mass_add: Range | None = None
    mass_bodies: tuple[str, ...] | None = None
    com_offset: Range | None = None
    com_bodies: tuple[str, ...] | None = None
    actuator_gain_scale: Range | None = None
    gain_actuators: tuple[str, ...] | None = None
    joint_damping_scale: Range | None = None
    damping_joints: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        # Configs arrive as lists (YAML/OmegaConf): normalise to tuples of floats / names.
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name in _RANGE_FIELDS:
                object.__setattr__(self, f.name, _as_range(f.name, value))
            else:
                if isinstance(value, str):
                    raise TypeError(
                        f"{f.name} must be a sequence of names, got the string {value!r}"
                    )
                object.__setattr__(self, f.name, tuple(str(v) for v in value))

    @property
    def enabled(self) -> bool:
        return any(getattr(self, name) is not None for name in _RANGE_FIELDS)


def _as_range(name: str, value: Sequence[float]) -> Range:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a (low, high) pair of numbers, got {value!r}") from err
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"{name} must be finite with low <= high, got ({low}, {high})")
    if name in _RANGE_MIN:
        bound, inclusive = _RANGE_MIN[name]
        if low < bound or (low == bound and not inclusive):
            relation = ">=" if inclusive else ">"
            raise ValueError(f"{name} low must be {relation} {bound}, got {low}")
    return (low, high)
