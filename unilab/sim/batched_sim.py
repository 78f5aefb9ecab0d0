"""BatchedSim: num_envs copies of one MjModel on one persistent `mujoco.batch.Batch`.

The step path is one `Batch.step(nstep=substeps, stage=mjSTAGE_VEL)` call plus a few
vectorized numpy checks: no per-env Python loop. mjSTAGE_VEL recomputes positions, velocities
and position/velocity sensors at the new state, so observations read after step() describe the
state the policy acts from (plain mj_step leaves them one substep behind); a persistent batch
continues its next step from those stages, so they are not computed twice. Acceleration-stage
values (qacc, touch/contact/force sensors) are those of the last substep, computed with the
controls that were applied. See docs/decisions/0002-batched-sim.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np
import numpy.typing as npt
from mujoco import batch as mjbatch

from unilab.sim.indices import as_env_ids, env_index, keyframe_id, object_id
from unilab.sim.randomization import DomainRandomization, DomainRandomizer
from unilab.sim.rays import ray_origins
from unilab.sim.stability import StabilityLimits, UnstableReason, find_unstable

_STAGE_NONE = int(mujoco.mjtStage.mjSTAGE_NONE)
_STAGE_VEL = int(mujoco.mjtStage.mjSTAGE_VEL)


@dataclass(frozen=True)
class StepStatus:
    """What happened to each env in one step()."""

    unstable: np.ndarray
    """(num_envs,) bool: the env went unstable and was reset to the default keyframe."""
    reasons: np.ndarray
    """(num_envs,) uint8 UnstableReason bits (WARNING, STATE, ERROR); 0 for a healthy env."""

    @property
    def num_unstable(self) -> int:
        return int(np.count_nonzero(self.unstable))


@dataclass(frozen=True)
class SimSnapshot:
    """Everything needed to replay a BatchedSim bit for bit from this point."""

    state: np.ndarray
    model_fields: dict[str, np.ndarray]
    rng_state: dict[str, Any]
    randomization_rng_state: dict[str, Any]
    unstable_count: int


@dataclass(frozen=True)
class EnvSnapshot:
    """One env's physics: its mujoco.batch state row and its rows of the randomized model
    fields. Its arrays are read-only copies, so one snapshot can be restored many times."""

    state: np.ndarray
    """(nstate,) float64: the env's mjSTATE_INTEGRATION row (time, qpos, qvel, act, warmstart,
    ctrl, applied forces, mocap poses, ...), as `Batch.state[env]`."""
    model_fields: dict[str, np.ndarray]
    """MjModel field name -> this env's values (the field's shape without the env axis), for
    every field the sim's DomainRandomizer expanded; {} without randomization."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", _frozen_copy(self.state))
        fields = {str(name): _frozen_copy(values) for name, values in self.model_fields.items()}
        object.__setattr__(self, "model_fields", fields)


def _frozen_copy(values: npt.ArrayLike) -> np.ndarray:
    out = np.array(values)
    out.flags.writeable = False
    return out


class BatchedSim:
    """num_envs simulations of model stepped together; state is exposed as live (num_envs, ...) views.

    Writable state views: qpos, qvel, ctrl, act, xfrc_applied (writes take effect at the next
    step). Read-only outputs, current after step()/reset(): qacc, time, sensordata, xpos, xquat,
    site_xpos, site_xmat, cvel, ncon. Contacts: read contact sensors with sensor(name) (see
    unilab.sim.contacts). Anything else: bind(name).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        nthread: int = 1,
        substeps: int = 1,
        seed: int = 0,
        *,
        randomization: DomainRandomization | None = None,
        limits: StabilityLimits | None = None,
        default_keyframe: int | str | None = None,
    ) -> None:
        if not isinstance(model, mujoco.MjModel):
            raise TypeError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        for name, value, low in (
            ("num_envs", num_envs, 1),
            ("nthread", nthread, 0),
            ("substeps", substeps, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.model = model
        self.num_envs = int(num_envs)
        self.substeps = int(substeps)
        self.seed = int(seed)
        self.batch = mjbatch.Batch(model, self.num_envs, int(nthread), persistent=True)
        self.nthread = int(self.batch.nthread)
        # Separate streams: tasks drawing from rng never shift the randomization draws.
        task_seed, dr_seed = np.random.SeedSequence(self.seed).spawn(2)
        self.rng = np.random.default_rng(task_seed)
        """Seeded generator for tasks (reset sampling, commands, noise)."""
        self._dr_rng = np.random.default_rng(dr_seed)
        self.randomization = randomization or DomainRandomization()
        self.randomizer: DomainRandomizer | None = None
        if self.randomization.enabled:
            self.randomizer = DomainRandomizer(self.batch, model, self.randomization, self._dr_rng)
        self.limits = limits or StabilityLimits()
        self._watched = self.limits.warning_indices()
        self.default_keyframe = keyframe_id(model, default_keyframe)

        bind = self.batch.bind
        self.time: np.ndarray = bind("time")
        self.qpos: np.ndarray = bind("qpos")
        self.qvel: np.ndarray = bind("qvel")
        self.ctrl: np.ndarray = bind("ctrl")
        self.act: np.ndarray = bind("act")
        """(num_envs, na); (num_envs, 0) when the model has no actuator activations."""
        self.xfrc_applied: np.ndarray = bind("xfrc_applied")
        self.qacc: np.ndarray = bind("qacc")
        self.sensordata: np.ndarray = bind("sensordata")
        self.xpos: np.ndarray = bind("xpos")
        self.xquat: np.ndarray = bind("xquat")
        self.site_xpos: np.ndarray = bind("site_xpos")
        self.site_xmat: np.ndarray = bind("site_xmat")
        self.cvel: np.ndarray = bind("cvel")
        self.ncon: np.ndarray = bind("ncon")
        self._bound = {"time", "qpos", "qvel", "ctrl", "act", "xfrc_applied", "qacc"}
        self._bound |= {"sensordata", "xpos", "xquat", "site_xpos", "site_xmat", "cvel", "ncon"}

        self.unstable_count = 0
        """Envs reset for instability since construction (an env counts once per step)."""
        self.last_error = ""
        self.state_version = 0
        """Counts the calls that changed the physics state (step, reset, restore, push): tasks
        key per-state caches of derived quantities on it."""
        """Message of the last SimulationError caught in step()."""
        self._warnings = self.batch.warning[:, :, 1]  # live (num_envs, mjNWARNING) counters
        self._warnings_before = self._warnings.copy()
        self._free_joint_dof: int | None = None
        self.reset(np.arange(self.num_envs))

    # -- stepping -----------------------------------------------------------------------

    def step(self, ctrl: npt.ArrayLike | None = None) -> StepStatus:
        """Write ctrl (num_envs, nu), advance every env by `substeps` physics steps, reset any
        env that went unstable, and report which did."""
        if ctrl is not None:
            ctrl = np.asarray(ctrl)
            if ctrl.shape != self.ctrl.shape:
                raise ValueError(
                    f"ctrl must have shape (num_envs, nu) = {self.ctrl.shape}, got {ctrl.shape}"
                )
            self.ctrl[...] = ctrl
        error_ids = None
        try:
            self.batch.step(nstep=self.substeps, stage=_STAGE_VEL)
        except mjbatch.SimulationError as err:  # those envs kept their previous state
            error_ids = np.asarray(err.ids, dtype=np.int64)
            self.last_error = str(err)
        reasons = find_unstable(
            self._warnings,
            self._warnings_before,
            self.qpos,
            self.qvel,
            self.qacc,
            self.ctrl,
            (self.act, self.sensordata),
            self.limits,
            self._watched,
        )
        if error_ids is not None:
            reasons[error_ids] |= np.uint8(UnstableReason.ERROR)
        unstable = reasons != 0
        if unstable.any():
            ids = np.flatnonzero(unstable)
            self._reset_state(ids, self.default_keyframe, None, None)
            self.unstable_count += len(ids)
        np.copyto(self._warnings_before, self._warnings)
        self.state_version += 1
        return StepStatus(unstable=unstable, reasons=reasons)

    # -- resets -------------------------------------------------------------------------

    def reset(
        self,
        ids: npt.ArrayLike,
        keyframe: int | str | None = None,
        qpos: npt.ArrayLike | None = None,
        qvel: npt.ArrayLike | None = None,
        *,
        randomize: bool = True,
    ) -> None:
        """Reset the envs in ids (integer ids or a (num_envs,) mask); the others are untouched.

        Each env goes to keyframe (None: the sim's default_keyframe, -1 being the model's
        defaults); qpos/qvel, (len(ids), nq|nv) or one row for all, then overwrite the keyframe's.
        With a randomization config, new physics parameters are drawn for these envs first.
        """
        env_ids = as_env_ids(ids, self.num_envs)
        if env_ids.size == 0:
            return
        key = self.default_keyframe if keyframe is None else keyframe_id(self.model, keyframe)
        qpos_rows = self._state_rows(qpos, env_ids.size, self.model.nq, "qpos")
        qvel_rows = self._state_rows(qvel, env_ids.size, self.model.nv, "qvel")
        order = np.argsort(env_ids, kind="stable")  # mujoco.batch wants sorted ids
        env_ids = env_ids[order]
        qpos_rows = None if qpos_rows is None else qpos_rows[order]
        qvel_rows = None if qvel_rows is None else qvel_rows[order]
        if randomize and self.randomizer is not None:
            self.randomizer.randomize(env_ids)
        self._reset_state(env_ids, key, qpos_rows, qvel_rows)

    def _state_rows(
        self, values: npt.ArrayLike | None, k: int, width: int, name: str
    ) -> np.ndarray | None:
        if values is None:
            return None
        arr = np.asarray(values, dtype=np.float64)
        if arr.shape == (width,):
            arr = np.broadcast_to(arr, (k, width))
        if arr.shape != (k, width):
            raise ValueError(
                f"{name} must have shape ({k}, {width}) for {k} env ids, got {arr.shape}"
            )
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} holds non-finite values; reset states must be finite")
        return arr

    def _reset_state(
        self, ids: np.ndarray, key: int, qpos: np.ndarray | None, qvel: np.ndarray | None
    ) -> None:
        try:
            if qpos is None and qvel is None:
                self.batch.reset(ids, key, stage=_STAGE_VEL)
            else:
                self.batch.reset(ids, key, stage=_STAGE_NONE)
                if qpos is not None:
                    self.qpos[ids] = qpos
                if qvel is not None:
                    self.qvel[ids] = qvel
                self.batch.forward(ids, stage=_STAGE_VEL)
        except mjbatch.SimulationError as err:
            raise RuntimeError(
                f"MuJoCo failed while resetting envs {err.ids.tolist()}: the model itself (or its"
                f" randomized parameters) is invalid there, not the state. {err}"
            ) from err
        self._warnings_before[ids] = self._warnings[ids]
        self.state_version += 1

    # -- snapshots ----------------------------------------------------------------------

    def snapshot(self) -> SimSnapshot:
        fields = {} if self.randomizer is None else self.randomizer.fields
        return SimSnapshot(
            state=self.batch.state.copy(),
            model_fields={name: values.copy() for name, values in fields.items()},
            rng_state=dict(self.rng.bit_generator.state),
            randomization_rng_state=dict(self._dr_rng.bit_generator.state),
            unstable_count=self.unstable_count,
        )

    def restore(self, snap: SimSnapshot) -> None:
        if snap.state.shape != self.batch.state.shape:
            raise ValueError(
                f"snapshot state has shape {snap.state.shape}; this sim's is {self.batch.state.shape}"
            )
        fields = {} if self.randomizer is None else self.randomizer.fields
        if set(fields) != set(snap.model_fields):
            raise ValueError(
                f"snapshot holds model fields {sorted(snap.model_fields)}, this sim {sorted(fields)}"
            )
        for name, values in snap.model_fields.items():
            fields[name][...] = values
        if self.randomizer is not None and self.randomizer.needs_set_const:
            self.batch.set_const()
        self.batch.state[...] = snap.state
        self.batch.forward(None, stage=_STAGE_VEL)
        self.rng.bit_generator.state = snap.rng_state
        self._dr_rng.bit_generator.state = snap.randomization_rng_state
        self.unstable_count = snap.unstable_count
        np.copyto(self._warnings_before, self._warnings)
        self.state_version += 1

    def env_snapshot(self, env: int) -> EnvSnapshot:
        """Env env's physics state and randomized model values, to restore into any env of a
        sim of the same model and randomization config (see restore_env)."""
        env = env_index(env, self.num_envs)
        fields = {} if self.randomizer is None else self.randomizer.fields
        return EnvSnapshot(
            state=self.batch.state[env],
            model_fields={name: values[env] for name, values in fields.items()},
        )

    def restore_env(self, env: int, snap: EnvSnapshot) -> None:
        """Put env env into the snapshot's state (taken from any env); the others are untouched.

        Position and velocity outputs (xpos, sensors, contacts) are recomputed; acceleration
        outputs (qacc, force sensors) stay stale until the next step, as after restore(). The
        rngs are shared by all envs and are not part of an env snapshot.
        """
        env = env_index(env, self.num_envs)
        if not isinstance(snap, EnvSnapshot):
            raise TypeError(f"snap must be an EnvSnapshot, got {type(snap).__name__}")
        width = self.batch.state.shape[1]
        if snap.state.shape != (width,):
            raise ValueError(
                f"env snapshot state has shape {snap.state.shape}; this sim's state rows are"
                f" ({width},): it comes from a different model"
            )
        if not np.isfinite(snap.state).all():
            raise ValueError("env snapshot state holds non-finite values")
        fields = {} if self.randomizer is None else self.randomizer.fields
        if set(fields) != set(snap.model_fields):
            raise ValueError(
                f"env snapshot holds randomized model fields {sorted(snap.model_fields)}; this"
                f" sim randomizes {sorted(fields)} (a different randomization config)"
            )
        for name, values in snap.model_fields.items():
            if values.shape != fields[name].shape[1:]:
                raise ValueError(
                    f"env snapshot model field {name!r} has shape {values.shape}; this sim's is"
                    f" {fields[name].shape[1:]}"
                )
        # Everything is checked: from here on the env is written.
        for name, values in snap.model_fields.items():
            fields[name][env] = values
        ids = np.array([env], dtype=np.int64)
        try:
            if self.randomizer is not None and self.randomizer.needs_set_const:
                self.batch.set_const(ids)
            self.batch.state[env] = snap.state
            self.batch.forward(ids, stage=_STAGE_VEL)
        except mjbatch.SimulationError as err:
            raise RuntimeError(f"MuJoCo failed while restoring env {env}: {err}") from err
        self._warnings_before[env] = self._warnings[env]
        self.state_version += 1

    # -- task helpers -------------------------------------------------------------------

    def bind(self, name: str) -> np.ndarray:
        """Live (num_envs, ...) view of any MjData field mujoco.batch can bind, current now."""
        view: np.ndarray = self.batch.bind(name)
        if name not in self._bound:
            self._bound.add(name)
            # A newly bound output reads zero until the next call: fill it now. Recomputing
            # the position/velocity stages at the same state changes no trajectory.
            self.batch.forward(None, stage=_STAGE_VEL)
        return view

    def sensor(self, name: str) -> np.ndarray:
        """Live (num_envs, dim) view of one sensor's slice of sensordata."""
        sid = object_id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, name)
        adr, dim = int(self.model.sensor_adr[sid]), int(self.model.sensor_dim[sid])
        return self.sensordata[:, adr : adr + dim]

    def apply_push(
        self, ids: npt.ArrayLike, velocity: npt.ArrayLike, joint: str | None = None
    ) -> None:
        """Kick the floating base of the envs in ids by a velocity change (a qvel write).

        velocity: (3,) or (len(ids), 3) linear m/s in the world frame, or 6 columns with an
        angular rad/s change in the body frame appended (MuJoCo's free-joint qvel layout).
        joint: the free joint; None picks the model's first. The kick is exact and independent
        of mass and substeps; it shows in cvel and velocity sensors after the next step.
        """
        env_ids = as_env_ids(ids, self.num_envs)
        dof = self._free_dof(joint)
        dv = np.asarray(velocity, dtype=np.float64)
        width = dv.shape[-1] if dv.ndim else 0
        if width not in (3, 6) or dv.ndim > 2 or (dv.ndim == 2 and dv.shape[0] != env_ids.size):
            raise ValueError(
                f"velocity must have shape (3,), (6,), ({env_ids.size}, 3) or ({env_ids.size}, 6),"
                f" got {dv.shape}"
            )
        if not np.isfinite(dv).all():
            raise ValueError("push velocity holds non-finite values")
        self.qvel[env_ids, dof : dof + width] += dv
        self.state_version += 1

    def _free_dof(self, joint: str | None) -> int:
        if joint is not None:
            jid = object_id(self.model, mujoco.mjtObj.mjOBJ_JOINT, joint)
            if self.model.jnt_type[jid] != mujoco.mjtJoint.mjJNT_FREE:
                raise ValueError(
                    f"joint {joint!r} is not a free joint; pushes need a floating base"
                )
            return int(self.model.jnt_dofadr[jid])
        if self._free_joint_dof is None:
            free = np.flatnonzero(self.model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
            if free.size == 0:
                raise ValueError("the model has no free joint; pushes need a floating base")
            self._free_joint_dof = int(self.model.jnt_dofadr[free[0]])
        return self._free_joint_dof

    def ray_heights(
        self,
        points_local: npt.ArrayLike,
        body: int | str,
        *,
        geomgroup: npt.ArrayLike | None = None,
        miss_distance: float = 10.0,
        yaw_only: bool = True,
    ) -> np.ndarray:
        """Height scan: distance straight down (-z world) from each scan point to the first geom.

        points_local: (k, 3) scan points in the body's frame (yaw_only: rotated by the body's
        heading only, as height scanners are, so terrain stays level under a tilting base).
        The body's own geoms are ignored; put other robot geoms in a group left out of
        geomgroup (mjNGROUP flags) to see only terrain. Returns (num_envs, k); misses and hits
        farther than miss_distance read miss_distance, so the result is always finite.
        """
        bid = object_id(self.model, mujoco.mjtObj.mjOBJ_BODY, body)
        pts = np.asarray(points_local, dtype=np.float64)
        if pts.ndim != 2 or pts.shape[1] != 3:
            raise ValueError(f"points_local must have shape (k, 3), got {pts.shape}")
        origins = ray_origins(self.xpos[:, bid], self.xquat[:, bid], pts, yaw_only)
        dist, _ = self.batch.ray(
            origins, np.array([0.0, 0.0, -1.0]), geomgroup=geomgroup, bodyexclude=bid
        )
        dist[(dist < 0) | (dist > miss_distance)] = miss_distance
        result: np.ndarray = dist
        return result
