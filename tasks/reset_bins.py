"""Reset bins cut from a grid: a box of starting conditions (target points, cube
placements, command ranges) cut into equal cells, one bin per cell (see
`Task.num_reset_bins` and docs/rollout-allocation.md)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def grid_cell_box(
    low: Sequence[float] | np.ndarray,
    high: Sequence[float] | np.ndarray,
    counts: Sequence[int],
    bins: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(k, d) lower and upper corners of the cells `bins` of the box [low, high] cut into
    `counts` equal cells per axis (bin = first-axis-major index into that grid)."""
    lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    n = np.asarray(counts)
    cell = np.stack(np.unravel_index(np.asarray(bins), tuple(int(c) for c in n)), axis=-1)
    size = (hi - lo) / n
    return lo + cell * size, lo + (cell + 1) * size


def check_bins(task: str, name: str, counts: Sequence[int], axes: Sequence[str]) -> None:
    """Refuse cell counts that are not one count >= 1 per axis, naming the key."""
    if len(counts) != len(axes) or min(counts) < 1:
        raise ValueError(
            f"task {task!r}: {name}={list(counts)} must be {len(axes)} cell counts >= 1 "
            f"(along {', '.join(axes)})"
        )
