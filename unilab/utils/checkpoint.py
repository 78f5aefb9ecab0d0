"""Checkpoints: written atomically, loaded with `weights_only=True`, corrupt ones named.

A checkpoint is a plain dict of tensors, numbers and strings (no pickled objects), so
`torch.load(..., weights_only=True)` reads it. Writes go to a temp file in the same
directory, are fsynced, then renamed over the final name, so a crash never leaves a torn
`ckpt_*.pt`. Resume takes the newest checkpoint that loads and falls back past bad ones.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

NAME = re.compile(r"^ckpt_(\d{9})\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be read; the message names the file."""


def checkpoint_path(directory: Path, iteration: int) -> Path:
    return directory / f"ckpt_{iteration:09d}.pt"


def save_checkpoint(directory: Path, iteration: int, state: dict[str, Any], keep: int = 3) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(directory, iteration)
    tmp = final.with_suffix(".pt.tmp")
    with tmp.open("wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)
    for old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return final


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if NAME.match(p.name))


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint not found: {path}") from None
    except Exception as exc:  # torch raises several types for truncated or foreign files
        raise CheckpointError(
            f"checkpoint {path} is unreadable (truncated or corrupt): {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(state, dict) or "iteration" not in state:
        raise CheckpointError(
            f"checkpoint {path} is not a unilab checkpoint (no 'iteration' entry)"
        )
    return state


def load_latest_good(
    directory: Path, map_location: str | torch.device = "cpu"
) -> tuple[Path, dict[str, Any], list[str]]:
    """Newest loadable checkpoint, plus one message per newer bad file it skipped."""
    skipped: list[str] = []
    for path in reversed(list_checkpoints(directory)):
        try:
            return path, load_checkpoint(path, map_location), skipped
        except CheckpointError as exc:
            skipped.append(str(exc))
    detail = ("; ".join(skipped)) if skipped else "no ckpt_*.pt files"
    raise CheckpointError(f"no readable checkpoint in {directory}: {detail}")


def rng_state() -> dict[str, Any]:
    """The learner process's RNG states, as weights_only-safe values (tensors and ints)."""
    _mt_name, mt_key, mt_pos, mt_has_gauss, mt_gauss = np.random.get_state(legacy=True)
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy_key": torch.from_numpy(np.asarray(mt_key, dtype=np.int64)),
        "numpy_pos": int(mt_pos),
        "numpy_gauss": [int(mt_has_gauss), float(mt_gauss)],
        "python": torch.tensor(internal, dtype=torch.int64),
        "python_meta": [int(version), gauss],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    key = state["numpy_key"].numpy().astype(np.uint32)
    has_gauss, gauss = state["numpy_gauss"]
    np.random.set_state(("MT19937", key, state["numpy_pos"], has_gauss, gauss))
    version, py_gauss = state["python_meta"]
    random.setstate((version, tuple(int(x) for x in state["python"].tolist()), py_gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
