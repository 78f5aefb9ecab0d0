"""Per-env physics parameters (domain randomization) through `mujoco.batch.Batch.expand`.

Only configured fields are expanded: an unconfigured DomainRandomization leaves every env on
the shared model, which steps as fast as the plain batch. Values are drawn relative to the
model's nominal values (never compounded across resets), for the reset envs only.

What each range means:
- friction_scale: one factor per env multiplies the sliding, torsional and rolling friction of
  every selected geom. MuJoCo combines a contact's friction as the max over its two geoms, so
  one factor per env scales every contact's friction by exactly that factor.
- mass_scale, mass_add: per selected body, mass' = mass * scale + add; the inertia tensor is
  scaled by mass'/mass (same shape, new density). set_const() then updates derived constants.
- com_offset: per selected body and axis, an offset (m) added to the centre of mass (body_ipos).
  MuJoCo fixes the mass-matrix structure of "simple" bodies (centre of mass at the body frame)
  at compile time, so selected bodies must be compiled with simple="false"; None selects
  every non-simple body with a mass.
- actuator_gain_scale: per selected actuator, kp scaled: gainprm[0] and, for position-like
  actuators (affine bias with biasprm[1] == -gainprm[0]), biasprm[1] too, so the actuator stays
  a PD around its target; velocity-like actuators (biasprm[2] == -gainprm[0]) scale biasprm[2].
- joint_damping_scale: per dof of each selected joint, dof_damping scaled.
"""

from __future__ import annotations

import mujoco
import numpy as np
from mujoco import batch as mjbatch

from unilab.config.randomization import DomainRandomization
from unilab.sim.indices import object_ids

_DOFS_PER_JOINT = {
    int(mujoco.mjtJoint.mjJNT_FREE): 6,
    int(mujoco.mjtJoint.mjJNT_BALL): 3,
    int(mujoco.mjtJoint.mjJNT_SLIDE): 1,
    int(mujoco.mjtJoint.mjJNT_HINGE): 1,
}


class DomainRandomizer:
    """Draws and writes per-env model values for a DomainRandomization config."""

    def __init__(
        self,
        batch: mjbatch.Batch,
        model: mujoco.MjModel,
        config: DomainRandomization,
        rng: np.random.Generator,
    ) -> None:
        self.config = config
        self._batch = batch
        self._rng = rng
        self.fields: dict[str, np.ndarray] = {}
        """Live per-env arrays of every expanded model field, by MjModel field name."""
        c = config
        obj = mujoco.mjtObj

        if c.friction_scale is not None:
            self._geoms = _select(
                model, obj.mjOBJ_GEOM, c.friction_geoms, np.arange(model.ngeom), "friction_scale"
            )
            self._friction0 = model.geom_friction[self._geoms].copy()
            self._expand("geom_friction")

        if c.mass_scale is not None or c.mass_add is not None:
            default = np.flatnonzero(model.body_mass > 0)
            self._mass_bodies = _select(
                model, obj.mjOBJ_BODY, c.mass_bodies, default, "mass_scale/mass_add"
            )
            self._mass0 = model.body_mass[self._mass_bodies].copy()
            self._inertia0 = model.body_inertia[self._mass_bodies].copy()
            if np.any(self._mass0 <= 0):
                bad = self._mass_bodies[self._mass0 <= 0]
                raise ValueError(
                    f"mass randomization needs bodies with a positive mass; bodies {bad.tolist()} have none"
                )
            scale_low = c.mass_scale[0] if c.mass_scale else 1.0
            add_low = c.mass_add[0] if c.mass_add else 0.0
            lightest = float(np.min(self._mass0 * scale_low + add_low))
            if lightest <= 0:
                raise ValueError(
                    f"mass_scale/mass_add could make a body's mass {lightest:.4g} kg <= 0; raise their lows"
                )
            self._expand("body_mass")
            self._expand("body_inertia")

        if c.com_offset is not None:
            default = np.flatnonzero(
                (model.body_simple == 0) & (model.body_mass > 0) & (model.body_mocapid < 0)
            )
            self._com_bodies = _select(
                model, obj.mjOBJ_BODY, c.com_bodies, default, "com_offset (non-simple bodies)"
            )
            self._ipos0 = model.body_ipos[self._com_bodies].copy()
            self._require_not_simple(model, self._com_bodies)
            self._expand("body_ipos")

        if c.actuator_gain_scale is not None:
            self._actuators = _select(
                model,
                obj.mjOBJ_ACTUATOR,
                c.gain_actuators,
                np.arange(model.nu),
                "actuator_gain_scale",
            )
            gain0 = model.actuator_gainprm[self._actuators].copy()
            bias0 = model.actuator_biasprm[self._actuators].copy()
            affine = model.actuator_biastype[self._actuators] == mujoco.mjtBias.mjBIAS_AFFINE
            kp = gain0[:, 0]
            self._pos_like = affine & np.isclose(bias0[:, 1], -kp) & (kp != 0)
            self._vel_like = affine & ~self._pos_like & np.isclose(bias0[:, 2], -kp) & (kp != 0)
            self._gain0, self._bias0 = gain0, bias0
            self._expand("actuator_gainprm")
            self._expand("actuator_biasprm")

        if c.joint_damping_scale is not None:
            joints = _select(
                model,
                obj.mjOBJ_JOINT,
                c.damping_joints,
                np.arange(model.njnt),
                "joint_damping_scale",
            )
            self._dofs = np.concatenate(
                [
                    model.jnt_dofadr[j] + np.arange(_DOFS_PER_JOINT[int(model.jnt_type[j])])
                    for j in joints
                ]
                or [np.zeros(0, np.int64)]
            ).astype(np.int64)
            self._damping0 = model.dof_damping[self._dofs].copy()
            self._expand("dof_damping")

        # mj_setConst reads masses, inertias and body_ipos: constants derived from them
        # (subtree masses, invweight0, actuator acc0) must follow.
        self.needs_set_const = any(
            name in self.fields for name in ("body_mass", "body_inertia", "body_ipos")
        )

    def _expand(self, name: str) -> None:
        self.fields[name] = self._batch.expand(name)

    @staticmethod
    def _require_not_simple(model: mujoco.MjModel, bodies: np.ndarray) -> None:
        """A "simple" body's mass-matrix structure (fixed at compile time) assumes its centre
        of mass sits at the body frame; per-env offsets would silently drop the coupling
        terms, and mj_setConst refuses them. Such bodies must be compiled as non-simple."""
        simple = bodies[model.body_simple[bodies] != 0]
        if simple.size:
            names = [model.body(int(b)).name or f"#{int(b)}" for b in simple]
            raise ValueError(
                f"com_offset needs bodies compiled as non-simple, but {names} are simple: set"
                ' simple="false" on them in the MJCF (or spec.body(name).simple = False)'
                " before compiling, or leave them out of com_bodies"
            )

    def randomize(self, ids: np.ndarray) -> None:
        """Draw new values for the envs in ids (sorted int array) and write only their rows."""
        c, rng, k = self.config, self._rng, len(ids)
        if k == 0:
            return
        rows = ids[:, None]
        if c.friction_scale is not None:
            scale = rng.uniform(*c.friction_scale, size=(k, 1, 1))
            self.fields["geom_friction"][rows, self._geoms] = self._friction0 * scale
        if c.mass_scale is not None or c.mass_add is not None:
            nb = len(self._mass_bodies)
            scale = rng.uniform(*c.mass_scale, size=(k, nb)) if c.mass_scale else np.ones((k, nb))
            add = rng.uniform(*c.mass_add, size=(k, nb)) if c.mass_add else np.zeros((k, nb))
            mass = self._mass0 * scale + add
            self.fields["body_mass"][rows, self._mass_bodies] = mass
            ratio = (mass / self._mass0)[:, :, None]
            self.fields["body_inertia"][rows, self._mass_bodies] = self._inertia0 * ratio
        if c.com_offset is not None:
            offset = rng.uniform(*c.com_offset, size=(k, len(self._com_bodies), 3))
            self.fields["body_ipos"][rows, self._com_bodies] = self._ipos0 + offset
        if c.actuator_gain_scale is not None:
            scale = rng.uniform(*c.actuator_gain_scale, size=(k, len(self._actuators)))
            gain = np.broadcast_to(self._gain0, (k, *self._gain0.shape)).copy()
            gain[:, :, 0] *= scale
            bias = np.broadcast_to(self._bias0, (k, *self._bias0.shape)).copy()
            bias[:, :, 1] = np.where(self._pos_like, self._bias0[:, 1] * scale, bias[:, :, 1])
            bias[:, :, 2] = np.where(self._vel_like, self._bias0[:, 2] * scale, bias[:, :, 2])
            self.fields["actuator_gainprm"][rows, self._actuators] = gain
            self.fields["actuator_biasprm"][rows, self._actuators] = bias
        if c.joint_damping_scale is not None:
            scale = rng.uniform(*c.joint_damping_scale, size=(k, len(self._dofs)))
            self.fields["dof_damping"][rows, self._dofs] = self._damping0 * scale
        if self.needs_set_const:
            self._batch.set_const(ids)


def _select(
    model: mujoco.MjModel,
    objtype: mujoco.mjtObj,
    names: tuple[str, ...] | None,
    default: np.ndarray,
    term: str,
) -> np.ndarray:
    ids = (
        np.asarray(default, dtype=np.int64) if names is None else object_ids(model, objtype, names)
    )
    if ids.size == 0:
        raise ValueError(f"{term} is configured but selects nothing in this model")
    return ids
