"""Vectorized geometry for ray casts: scan points in a body frame to world-frame origins."""

from __future__ import annotations

import numpy as np


def quat_to_mat(quat: np.ndarray) -> np.ndarray:
    """(n, 4) unit quaternions (w, x, y, z), MuJoCo's order, to (n, 3, 3) rotation matrices."""
    w, x, y, z = (quat[:, i] for i in range(4))
    mat = np.empty((quat.shape[0], 3, 3))
    mat[:, 0, 0] = 1 - 2 * (y * y + z * z)
    mat[:, 0, 1] = 2 * (x * y - w * z)
    mat[:, 0, 2] = 2 * (x * z + w * y)
    mat[:, 1, 0] = 2 * (x * y + w * z)
    mat[:, 1, 1] = 1 - 2 * (x * x + z * z)
    mat[:, 1, 2] = 2 * (y * z - w * x)
    mat[:, 2, 0] = 2 * (x * z - w * y)
    mat[:, 2, 1] = 2 * (y * z + w * x)
    mat[:, 2, 2] = 1 - 2 * (x * x + y * y)
    return mat


def yaw_to_mat(quat: np.ndarray) -> np.ndarray:
    """(n, 3, 3) rotations about world z by each quaternion's heading."""
    w, x, y, z = (quat[:, i] for i in range(4))
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    c, s = np.cos(yaw), np.sin(yaw)
    mat = np.zeros((quat.shape[0], 3, 3))
    mat[:, 0, 0], mat[:, 0, 1] = c, -s
    mat[:, 1, 0], mat[:, 1, 1] = s, c
    mat[:, 2, 2] = 1.0
    return mat


def ray_origins(
    pos: np.ndarray, quat: np.ndarray, points_local: np.ndarray, yaw_only: bool
) -> np.ndarray:
    """World origins (n, k, 3) of k body-frame points for n bodies at pos (n, 3), quat (n, 4)."""
    rot = yaw_to_mat(quat) if yaw_only else quat_to_mat(quat)
    origins: np.ndarray = pos[:, None, :] + np.einsum("nij,kj->nki", rot, points_local)
    return origins
