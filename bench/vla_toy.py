"""Two-mode toy demonstrations in a real episode store, for the VLA tests and `bench vla`.

Every episode goes around an obstacle on the left or on the right (mode m = -1 or +1, drawn
per episode): its first action coordinate is m * `MODE_OFFSET` plus small noise, the second
follows the time in the episode. Nothing the policy observes tells the modes apart
(proprioception is the episode phase, the camera shows a bar that moves with the phase, the
instruction is the same), so a policy that imitates well must produce both modes, while a
regression head averages them to ~0. The mode is written to the store's `mode` column as
0 (left) / 1 (right), as the experts record their strategy, and to its `token` column: the
ground-truth strategy id a token-conditioned policy can use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from unilab.data import EpisodeStore, FieldSpec, StoreSchema

MODE_OFFSET = 0.8
VOCABULARY = ["<pad>", "go", "around", "the", "obstacle"]
INSTRUCTION = [1, 2, 3, 4, 0, 0]
PROPRIO_DIM = 4
ACTION_DIM = 2


def toy_schema(image_size: int = 16) -> StoreSchema:
    return StoreSchema.build(
        obs={"policy": PROPRIO_DIM},
        action=ACTION_DIM,
        images={"front": (image_size, image_size)},
        extra={
            "obs/instruction": FieldSpec((len(INSTRUCTION),), "int64"),
            "mode": FieldSpec((), "int32"),
        },
    )


def toy_episode(
    rng: np.random.Generator, length: int, image_size: int, mode: int
) -> dict[str, np.ndarray]:
    phase = np.arange(length) / length
    proprio = np.stack(
        [phase, np.sin(2 * np.pi * phase), np.cos(2 * np.pi * phase), rng.normal(0, 0.1, length)],
        axis=1,
    ).astype(np.float32)
    side = 1.0 if mode == 1 else -1.0
    action = np.stack(
        [side * MODE_OFFSET + rng.normal(0, 0.05, length), 0.5 - phase], axis=1
    ).astype(np.float32)
    images = np.full((length, image_size, image_size, 3), 40, np.uint8)
    cols = (phase * (image_size - 1)).astype(int)
    images[np.arange(length), :, cols, :] = 220
    last = np.arange(length) == length - 1
    return {
        "obs/policy": proprio,
        "images/front": images,
        "obs/instruction": np.tile(np.asarray(INSTRUCTION, np.int64), (length, 1)),
        "action": action,
        "reward": last.astype(np.float32),
        "terminated": last,
        "truncated": np.zeros(length, bool),
        "origin": np.zeros(length, np.uint8),
        "token": np.full(length, mode, np.int32),
        "mode": np.full(length, mode, np.int32),
    }


def write_toy_store(
    path: str | Path,
    episodes: int = 40,
    length: int = 16,
    image_size: int = 16,
    seed: int = 0,
) -> Path:
    """Write `episodes` two-mode episodes (modes alternate, so both are equally common)."""
    rng = np.random.default_rng(seed)
    with EpisodeStore.create(path, toy_schema(image_size), overwrite=True) as store:
        store.append_episodes(
            [
                (toy_episode(rng, length, image_size, k % 2), {"task": "toy_two_mode", "fps": 10.0})
                for k in range(episodes)
            ]
        )
    return Path(path)


def mode_fractions(first_coordinate_means: np.ndarray, threshold: float = 0.4) -> dict[str, float]:
    """Fractions of sampled chunks in the left mode, the right mode, and in between."""
    x = np.asarray(first_coordinate_means)
    left, right = float(np.mean(x < -threshold)), float(np.mean(x > threshold))
    return {"left": left, "right": right, "between": 1.0 - left - right}
