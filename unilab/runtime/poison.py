"""Poison values that make a read of never-written ring memory obvious.

Floats are NaN; every other dtype is all 0xFF bytes (255 for uint8, -1 for signed ints, a
non-canonical True for bool). A reader that finds poison in a published chunk has caught a
worker that published before writing everything.
"""

from __future__ import annotations

import numpy as np

POISON_BYTE = 0xFF


def fill_poison(array: np.ndarray) -> None:
    """Overwrite `array` in place with its dtype's poison value."""
    if np.issubdtype(array.dtype, np.floating):
        array.fill(np.nan)
    else:
        _as_bytes(array).fill(POISON_BYTE)


def poison_mask(array: np.ndarray) -> np.ndarray:
    """Boolean mask, same shape as `array`, True where an element still holds poison."""
    if np.issubdtype(array.dtype, np.floating):
        return np.isnan(array)
    per_elem = _as_bytes(array).reshape(*array.shape, array.dtype.itemsize)
    return np.all(per_elem == POISON_BYTE, axis=-1)


def has_poison(array: np.ndarray) -> bool:
    return bool(poison_mask(array).any())


def _as_bytes(array: np.ndarray) -> np.ndarray:
    if not array.flags.c_contiguous:
        raise ValueError("poison helpers need a C-contiguous array (ring views are)")
    return array.reshape(-1).view(np.uint8)
