"""One env of a task, complete and portable: `Task.save_env` writes an `EnvState`,
`Task.restore_env` puts it into any env of a task built from the same config, and
`to_arrays`/`save` store it as plain arrays (no pickle)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unilab.sim.batched_sim import EnvSnapshot

ENV_STATE_VERSION = 1
"""Layout version of `EnvState.to_arrays()`; from_arrays refuses any other."""


@dataclass(frozen=True)
class EnvState:
    """One env of a task, complete: its physics (EnvSnapshot), its rows of the task's per-env
    arrays (`Task._BASE_STATE` + `state_attrs`) and its episode seed. `Task.restore_env` puts
    it into any env of a task built from the same config; `to_arrays`/`from_arrays` store it
    as plain arrays (`np.savez`, loadable with allow_pickle=False)."""

    task: str
    """The task's config name (`cfg.name`)."""
    sim: EnvSnapshot
    arrays: dict[str, np.ndarray]
    """Task attribute name -> this env's row (read-only copies)."""
    episode_seed: int
    """The env's episode seed; -1: its episode came from the shared stream."""

    def __post_init__(self) -> None:
        rows = {}
        for name, values in self.arrays.items():
            row = np.array(values)
            row.flags.writeable = False
            rows[str(name)] = row
        object.__setattr__(self, "arrays", rows)
        object.__setattr__(self, "episode_seed", int(self.episode_seed))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain named arrays (no objects): `np.savez(path, **state.to_arrays())`."""
        out = {
            "version": np.array(ENV_STATE_VERSION, dtype=np.int64),
            "task": np.array(self.task),
            "episode_seed": np.array(self.episode_seed, dtype=np.int64),
            "sim/state": self.sim.state,
        }
        out.update({f"sim/model/{k}": v for k, v in self.sim.model_fields.items()})
        out.update({f"task/{k}": v for k, v in self.arrays.items()})
        return out

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write this state as an .npz of plain arrays, atomically (temp, fsync, rename)."""
        import io

        from unilab.utils.atomic import atomic_write_bytes

        buf = io.BytesIO()
        arrays: dict[str, Any] = self.to_arrays()
        np.savez(buf, **arrays)
        return atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EnvState:
        """A state `save` wrote (read with allow_pickle=False): restore it into any env of
        a task built from the same config with `task.restore_env(env, EnvState.load(p))`."""
        with np.load(path, allow_pickle=False) as npz:
            return cls.from_arrays(npz)

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> EnvState:
        """The state to_arrays() wrote; arrays may be the NpzFile of `np.load(path)`."""
        d = {str(k): np.asarray(arrays[k]) for k in arrays}
        missing = [k for k in ("version", "task", "episode_seed", "sim/state") if k not in d]
        if missing:
            raise ValueError(f"not an env state: no {', '.join(missing)} among {sorted(d)}")
        version = int(d.pop("version"))
        if version != ENV_STATE_VERSION:
            raise ValueError(
                f"env state layout version {version}; this unilab reads {ENV_STATE_VERSION}"
            )
        fields, rows = {}, {}
        for key, values in d.items():
            if key.startswith("sim/model/"):
                fields[key.removeprefix("sim/model/")] = values
            elif key.startswith("task/"):
                rows[key.removeprefix("task/")] = values
            elif key not in ("task", "episode_seed", "sim/state"):
                raise ValueError(f"unknown env state entry {key!r}")
        return cls(
            task=str(d["task"]),
            sim=EnvSnapshot(state=d["sim/state"], model_fields=fields),
            arrays=rows,
            episode_seed=int(d["episode_seed"]),
        )
