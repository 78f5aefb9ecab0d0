"""Checkpoint I/O moved to `unilab.utils.checkpoint` (export and deploy read checkpoints without
the training stack); this name stays so existing imports keep working."""

from unilab.utils.checkpoint import (
    NAME,
    CheckpointError,
    checkpoint_path,
    list_checkpoints,
    load_checkpoint,
    load_latest_good,
    rng_state,
    save_checkpoint,
    set_rng_state,
)

__all__ = [
    "NAME",
    "CheckpointError",
    "checkpoint_path",
    "list_checkpoints",
    "load_checkpoint",
    "load_latest_good",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]
