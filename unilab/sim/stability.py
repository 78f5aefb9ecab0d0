"""Which envs went unstable in a step: warning counters, non-finite or runaway state.

MuJoCo answers a diverging state (NaN, or a value past its 1e10 limit) by raising a warning
counter and, unless autoreset is disabled, silently resetting that MjData to the model's
defaults mid-step. A bad control raises mjWARN_BADCTRL, is ignored for the step and stays in
the state. Errors (mju_error) reach us as `mujoco.batch.SimulationError`. The checks here
cover the first two; BatchedSim adds the third.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import mujoco
import numpy as np

ALL_WARNINGS: tuple[str, ...] = tuple(
    name.removeprefix("mjWARN_") for name in mujoco.mjtWarning.__members__ if name != "mjNWARNING"
)


class UnstableReason(enum.IntFlag):
    """Why an env was reset; StepStatus.reasons holds these bits per env."""

    WARNING = 1
    """A MuJoCo warning counter rose (bad qpos/qvel/qacc/ctrl, full arena, ...)."""
    STATE = 2
    """qpos, qvel, qacc or ctrl was non-finite or beyond StabilityLimits, or act/sensors non-finite."""
    ERROR = 4
    """MuJoCo raised an error in this env (SimulationError); it kept its previous state."""


@dataclass(frozen=True)
class StabilityLimits:
    """Thresholds past which an env counts as unstable, in MuJoCo's units (m, rad, s)."""

    max_abs_qpos: float = 1e4
    max_abs_qvel: float = 1e4
    max_abs_qacc: float = 1e8
    max_abs_ctrl: float = 1e10
    """MuJoCo's own bound (mjMAXVAL): past it an unclamped control raises mjWARN_BADCTRL; a
    clamped one would pass silently, so it is checked here too."""
    warnings: tuple[str, ...] = field(default=ALL_WARNINGS)
    """Warning counters to watch, by mjtWarning name without the prefix: BADQVEL, ..."""

    def __post_init__(self) -> None:
        for name in ("max_abs_qpos", "max_abs_qvel", "max_abs_qacc", "max_abs_ctrl"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"StabilityLimits.{name} must be > 0, got {value}")
        unknown = [w for w in self.warnings if w not in ALL_WARNINGS]
        if unknown:
            raise ValueError(f"unknown MuJoCo warnings {unknown}; valid: {list(ALL_WARNINGS)}")

    def warning_indices(self) -> np.ndarray:
        return np.array(
            [int(mujoco.mjtWarning.__members__["mjWARN_" + w]) for w in self.warnings],
            dtype=np.int64,
        )


# |x| <= this holds for every finite float and fails for inf and NaN: "finite" as a limit.
_FINITE = float(np.finfo(np.float64).max)


def _all_within(values: np.ndarray, limit: float) -> bool:
    """Whole-array check, no temporaries: NaN makes max() NaN, which fails the comparison."""
    return values.size == 0 or bool(values.max() <= limit and values.min() >= -limit)


def _rows_within(values: np.ndarray, limit: float) -> np.ndarray:
    """(n,) True where every |value| of the row is <= limit (NaN counts as outside)."""
    flat = values.reshape(values.shape[0], -1)
    if flat.shape[1] == 0:
        return np.ones(values.shape[0], dtype=bool)
    result: np.ndarray = np.abs(flat).max(axis=1) <= limit
    return result


def find_unstable(
    warning_counts: np.ndarray,
    previous_counts: np.ndarray,
    qpos: np.ndarray,
    qvel: np.ndarray,
    qacc: np.ndarray,
    ctrl: np.ndarray,
    finite_only: Sequence[np.ndarray],
    limits: StabilityLimits,
    watched: np.ndarray | None = None,
) -> np.ndarray:
    """Per-env UnstableReason bits, (n,) uint8; 0 where the env is fine.

    warning_counts and previous_counts are (n, mjNWARNING) counters after and before the step;
    a counter that changed counts as a rise, since MuJoCo's autoreset zeroes the counters
    before it increments one. finite_only are (n, ...) arrays that must merely be finite.
    The common case, every env fine, costs a few whole-array reductions; per-env rows are
    only examined when something is off.
    """
    if watched is None:
        watched = limits.warning_indices()
    if len(watched) != warning_counts.shape[1]:
        warning_counts, previous_counts = warning_counts[:, watched], previous_counts[:, watched]
    checks = [
        (qpos, limits.max_abs_qpos),
        (qvel, limits.max_abs_qvel),
        (qacc, limits.max_abs_qacc),
        (ctrl, limits.max_abs_ctrl),
    ] + [(values, _FINITE) for values in finite_only]
    reasons = np.zeros(qpos.shape[0], dtype=np.uint8)
    warned = not np.array_equal(warning_counts, previous_counts)
    if not warned and all(_all_within(values, limit) for values, limit in checks):
        return reasons
    if warned:
        rose = (warning_counts != previous_counts).any(axis=1)
        reasons[rose] |= np.uint8(UnstableReason.WARNING)
    ok = np.ones(qpos.shape[0], dtype=bool)
    for values, limit in checks:
        ok &= _rows_within(values, limit)
    reasons[~ok] |= np.uint8(UnstableReason.STATE)
    return reasons
