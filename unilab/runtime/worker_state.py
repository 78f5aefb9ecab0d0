"""A sim worker's full state on disk, for bit-exact resume in sync mode.

Arrays go into an `.npz` (read back with allow_pickle=False); RNG states, which are dicts
of ints, go in as a JSON string. Written to a temp name, fsynced, then renamed.

A file is named by the learner iteration it pairs with (the checkpoint `ckpt_<iteration>`
taken after learning from the chunk the worker had just made) and by the worker's
generation (0 for the first process of a run, +1 per respawn), so a respawned worker never
writes under a name that pairs it with the wrong checkpoint, and resume can tell whether a
state comes from a worker that was restarted.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.runtime.rollout import RolloutState
from unilab.sim.batched_sim import SimSnapshot
from unilab.tasks.base import Task

_NAME = re.compile(r"^worker(\d{3})_it(\d{9})_gen(\d{3,})\.npz$")


def state_file(directory: Path, worker_id: int, iteration: int, generation: int = 0) -> Path:
    return directory / f"worker{worker_id:03d}_it{iteration:09d}_gen{generation:03d}.npz"


def parse_state_file(path: Path) -> tuple[int, int, int] | None:
    """(worker, iteration, generation) of a state file name, or None for other files."""
    match = _NAME.match(path.name)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def find_state_file(directory: Path, worker_id: int, iteration: int) -> Path | None:
    """The state worker `worker_id` saved at `iteration` (its newest generation), if any."""
    found = [
        (parsed[2], path)
        for path in (directory.glob(f"worker{worker_id:03d}_it{iteration:09d}_gen*.npz"))
        if (parsed := parse_state_file(path)) is not None
    ]
    return max(found)[1] if found else None


def prune_state_files(directory: Path, below: int | None = None, above: int | None = None) -> int:
    """Delete state files whose iteration is below `below` or above `above` (each when
    given); returns how many were deleted."""
    if not directory.is_dir():
        return 0
    removed = 0
    for path in directory.iterdir():
        parsed = parse_state_file(path)
        if parsed is None:
            continue
        iteration = parsed[1]
        if (below is not None and iteration < below) or (above is not None and iteration > above):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def save_worker_state(path: Path, task: Task, rollout: RolloutState, seq: int) -> None:
    snap = task.sim.snapshot()
    arrays: dict[str, Any] = {"sim.state": snap.state}
    arrays.update({f"sim.field.{k}": v for k, v in snap.model_fields.items()})
    arrays.update({f"task.{k}": v for k, v in task.get_state().items()})
    arrays.update({f"obs_{k}": v for k, v in rollout.obs.items()})
    arrays["torch_rng"] = torch.get_rng_state().numpy()
    meta = {
        "sim_rng": snap.rng_state,
        "dr_rng": snap.randomization_rng_state,
        "unstable_count": snap.unstable_count,
        "seq": seq,
        "env_steps": rollout.env_steps,
        "sim_unstable": rollout.sim_unstable,
    }
    arrays["meta"] = np.array(json.dumps(meta))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    with tmp.open("wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_worker_state(path: Path, task: Task, rollout: RolloutState) -> int:
    """Restore task, sim, observations and torch RNG; returns the next chunk sequence number."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays.pop("meta")))
    fields = {
        k.removeprefix("sim.field."): v for k, v in arrays.items() if k.startswith("sim.field.")
    }
    task.sim.restore(
        SimSnapshot(
            state=arrays["sim.state"],
            model_fields=fields,
            rng_state=meta["sim_rng"],
            randomization_rng_state=meta["dr_rng"],
            unstable_count=int(meta["unstable_count"]),
        )
    )
    task.set_state({k.removeprefix("task."): v for k, v in arrays.items() if k.startswith("task.")})
    rollout.obs = {k.removeprefix("obs_"): v for k, v in arrays.items() if k.startswith("obs_")}
    rollout.env_steps = int(meta["env_steps"])
    rollout.sim_unstable = int(meta["sim_unstable"])
    torch.set_rng_state(torch.from_numpy(arrays["torch_rng"]))
    return int(meta["seq"])
