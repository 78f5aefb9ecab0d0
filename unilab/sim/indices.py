"""Validation of env ids, keyframes and MJCF object names, with errors that say what is valid."""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np
import numpy.typing as npt


def as_env_ids(ids: npt.ArrayLike, num_envs: int) -> np.ndarray:
    """Env ids as a 1-D int64 array; accepts integer ids (any order, unique) or a (num_envs,) mask.

    The order of integer ids is kept, so that rows of per-id arrays (qpos, qvel, ...) stay
    paired with their ids; callers sort when MuJoCo needs sorted ids.
    """
    arr = np.asarray(ids)
    if arr.dtype == np.bool_:
        if arr.shape != (num_envs,):
            raise ValueError(f"a boolean env mask must have shape ({num_envs},), got {arr.shape}")
        return np.flatnonzero(arr)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"env ids must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"env ids must be integers or a boolean mask, got dtype {arr.dtype}")
    out = arr.astype(np.int64, copy=False)
    bad = out[(out < 0) | (out >= num_envs)]
    if bad.size:
        raise IndexError(f"env id {int(bad[0])} is out of range: valid ids are 0..{num_envs - 1}")
    if out.size > 1:
        uniq = np.unique(out)
        if uniq.size != out.size:
            counts = np.bincount(out)
            raise ValueError(f"env ids must be unique, got {int(np.argmax(counts))} twice or more")
    return out


def env_index(env: object, num_envs: int) -> int:
    """One env id as an int, with an error that says the valid range."""
    if isinstance(env, bool) or not isinstance(env, int | np.integer):
        raise TypeError(f"an env id must be an integer, got {env!r}")
    if not 0 <= int(env) < num_envs:
        raise IndexError(f"env id {int(env)} is out of range: valid ids are 0..{num_envs - 1}")
    return int(env)


def keyframe_id(model: mujoco.MjModel, keyframe: int | str | None) -> int:
    """The keyframe index for a name or index; None means the model's defaults (-1)."""
    if keyframe is None:
        return -1
    if isinstance(keyframe, str):
        key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, keyframe)
        if key < 0:
            names = [model.key(i).name for i in range(model.nkey)]
            raise KeyError(
                f"unknown keyframe {keyframe!r}; the model has {names or 'no keyframes'}"
            )
        return int(key)
    if isinstance(keyframe, bool) or not isinstance(keyframe, int | np.integer):
        raise TypeError(f"keyframe must be a name, an index or None, got {keyframe!r}")
    if not -1 <= int(keyframe) < model.nkey:
        raise IndexError(
            f"keyframe {int(keyframe)} is out of range: the model has {model.nkey} keyframes"
            " (-1 means the model's defaults)"
        )
    return int(keyframe)


_OBJ_COUNT = {
    mujoco.mjtObj.mjOBJ_BODY: "nbody",
    mujoco.mjtObj.mjOBJ_GEOM: "ngeom",
    mujoco.mjtObj.mjOBJ_JOINT: "njnt",
    mujoco.mjtObj.mjOBJ_ACTUATOR: "nu",
    mujoco.mjtObj.mjOBJ_SITE: "nsite",
    mujoco.mjtObj.mjOBJ_SENSOR: "nsensor",
    mujoco.mjtObj.mjOBJ_CAMERA: "ncam",
}


def object_id(model: mujoco.MjModel, objtype: mujoco.mjtObj, key: int | str) -> int:
    """Id of one named (or numbered) object of objtype, with the valid names on error."""
    count = int(getattr(model, _OBJ_COUNT[objtype]))
    kind = objtype.name.removeprefix("mjOBJ_").lower()
    if isinstance(key, str):
        found = mujoco.mj_name2id(model, objtype, key)
        if found < 0:
            names = [mujoco.mj_id2name(model, objtype, i) for i in range(count)]
            named = [n for n in names if n]
            raise KeyError(f"unknown {kind} {key!r}; the model's named {kind}s: {named}")
        return int(found)
    if not 0 <= int(key) < count:
        raise IndexError(f"{kind} id {int(key)} is out of range: the model has {count}")
    return int(key)


def object_ids(
    model: mujoco.MjModel, objtype: mujoco.mjtObj, keys: Sequence[int | str]
) -> np.ndarray:
    """Ids of several objects of one type, as an int64 array, in the given order."""
    return np.array([object_id(model, objtype, k) for k in keys], dtype=np.int64)
