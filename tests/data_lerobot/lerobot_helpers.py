"""Deterministic episodes and camera streams for the LeRobot interop tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from unilab.data import EpisodeMeta, EpisodeStore, FieldSpec, StoreSchema

H, W = 48, 64
FPS = 50


def camera_frames(n: int, phase: int) -> np.ndarray:
    """(n, H, W, 3) uint8 frames of a smooth, moving render-like scene (what a codec is
    built for: gradients that shift a little each frame)."""
    y, x = np.mgrid[0:H, 0:W].astype(np.float64)
    t = np.arange(n, dtype=np.float64)[:, None, None]
    r = 128 + 90 * np.sin((x[None] + 2 * t + phase) / 11.0)
    g = 128 + 90 * np.cos((y[None] - t + 3 * phase) / 9.0)
    b = 60 + 2.0 * (x[None] + y[None]) / 2 + 0 * t
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


def schema() -> StoreSchema:
    return StoreSchema(
        {
            "obs/policy": FieldSpec((5,), "float32"),
            "obs/critic": FieldSpec((7,), "float64"),
            "images/front": FieldSpec((H, W, 3), "uint8"),
            "action": FieldSpec((3,), "float32"),
        }
    )


def episode(k: int) -> tuple[dict[str, np.ndarray], EpisodeMeta]:
    n = 12 + 7 * k
    rng = np.random.default_rng(k)
    j = np.arange(n)
    last = j == n - 1
    frames = {
        "obs/policy": rng.standard_normal((n, 5)).astype(np.float32),
        "obs/critic": rng.standard_normal((n, 7)) * 1e3 + 1 / 3,  # float64 digits beyond float32
        "images/front": camera_frames(n, phase=17 * k),
        "action": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "reward": rng.standard_normal(n).astype(np.float32),
        "terminated": last & (k % 2 == 0),
        "truncated": last & (k % 2 == 1),
        "timestamp": 100.0 * k + j / FPS + 1e-9 * k,  # float64 stamps that float32 would round
        "origin": np.full(n, k % 4, np.uint8),
        "is_intervention": (j % 3 == 0) & (k > 0),
        "policy_version": np.full(n, 10 + k, np.int64),
        "token": (j % 4 - 1).astype(np.int32),
        "segment": ((j + k) % 5).astype(np.uint8),
    }
    meta = EpisodeMeta(
        task=f"task{k}",
        language_instruction=f"put block {k} in the bowl",
        success=k % 2 == 0,
        seed=k,
        robot="so100",
        fps=float(FPS),
        tags={"k": k, "nested": {"list": [k, k + 1]}},
    )
    return frames, meta


def make_store(path: Path, episodes: int) -> list[tuple[dict[str, np.ndarray], EpisodeMeta]]:
    made = [episode(k) for k in range(episodes)]
    with EpisodeStore.create(path, schema()) as store:
        store.append_episodes(made)
    return made


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)
