"""A sim worker's full state on disk, for bit-exact resume in sync mode.

Arrays go into an `.npz` (read back with allow_pickle=False); RNG states, which are dicts
of ints, go in as a JSON string. Written to a temp name, then renamed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.runtime.rollout import RolloutState
from unilab.sim.batched_sim import SimSnapshot
from unilab.tasks.base import Task


def state_file(directory: Path, worker_id: int, chunk: int) -> Path:
    return directory / f"worker{worker_id:03d}_chunk{chunk:09d}.npz"


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
    np.savez(tmp, **arrays)
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
