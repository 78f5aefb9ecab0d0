"""Small geometry for the tabletop family: planar rotations, angle wrapping, quaternions,
and object placements kept apart."""

from __future__ import annotations

import numpy as np


def rotation_z(yaw: np.ndarray) -> np.ndarray:
    """(n, 3, 3) rotations about world z."""
    c, s = np.cos(yaw), np.sin(yaw)
    rot = np.zeros((len(yaw), 3, 3))
    rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1], rot[:, 2, 2] = c, -s, s, c, 1.0
    return rot


def cos_sin(angle: np.ndarray) -> np.ndarray:
    """(n,) angles -> (n, 2) [cos, sin]."""
    return np.stack([np.cos(angle), np.sin(angle)], axis=1)


def wrap_angle(a: np.ndarray) -> np.ndarray:
    """Angles wrapped into [-pi, pi)."""
    return (a + np.pi) % (2 * np.pi) - np.pi


def quat_from_rotvec(v: np.ndarray) -> np.ndarray:
    """(..., 4) unit quaternions (w, x, y, z) of rotation vectors (..., 3)."""
    angle = np.linalg.norm(v, axis=-1, keepdims=True)
    half = 0.5 * angle
    axis = np.divide(v, angle, out=np.zeros_like(v), where=angle > 1e-12)
    return np.concatenate([np.cos(half), np.sin(half) * axis], axis=-1)


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton products a * b of (..., 4) quaternions (w, x, y, z)."""
    w1, x1, y1, z1 = np.moveaxis(a, -1, 0)
    w2, x2, y2, z2 = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ],
        axis=-1,
    )


def sample_separated(
    rng: np.random.Generator,
    low: np.ndarray,
    high: np.ndarray,
    min_dist: float,
    placed: np.ndarray,
    tries: int = 64,
) -> np.ndarray:
    """(k, 2) points in the box [low, high] (each (k, 2) or (2,)), at least min_dist from
    every point in placed (k, m, 2) where possible (else the farthest of `tries` draws)."""
    k = placed.shape[0]
    low = np.broadcast_to(np.asarray(low, dtype=np.float64), (k, 2))
    high = np.broadcast_to(np.asarray(high, dtype=np.float64), (k, 2))
    cand = rng.uniform(low[:, None], high[:, None], (k, tries, 2))
    if placed.shape[1] == 0:
        return cand[:, 0]
    dist = np.linalg.norm(cand[:, :, None] - placed[:, None], axis=-1).min(axis=2)
    ok = dist >= min_dist
    best = np.where(ok.any(axis=1), np.argmax(ok, axis=1), np.argmax(dist, axis=1))
    return cand[np.arange(k), best]


def pick_off_path(
    cand: np.ndarray,
    start: np.ndarray,
    u: np.ndarray,
    placed: np.ndarray,
    length: np.ndarray | None = None,
    allowed: np.ndarray | None = None,
) -> np.ndarray:
    """(k, 2) the first of each row's candidates (k, m, 2) that keeps a distractor out of a
    cube's way: more than 10 cm beside the path from start (k, 2) along u (k, 2), or 8 cm
    before it or past its end (`length`, (k,) m; None: no end), more than 9 cm from every
    point in placed (k, p, 2), and `allowed` (k, m) where given. A row with no such
    candidate takes its first."""
    rel = cand - start[:, None]
    along = np.einsum("ktj,kj->kt", rel, u)
    across = np.abs(rel[..., 0] * u[:, None, 1] - rel[..., 1] * u[:, None, 0])
    off_path = (across > 0.1) | (along < -0.08)
    if length is not None:
        off_path |= along > length[:, None] + 0.08
    far = np.linalg.norm(cand[:, :, None] - placed[:, None], axis=-1).min(axis=2) > 0.09
    ok = off_path & far if allowed is None else off_path & far & allowed
    pick = np.where(ok.any(axis=1), np.argmax(ok, axis=1), 0)
    return cand[np.arange(len(cand)), pick]
