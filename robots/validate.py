"""Load a robot's MJCF scene and check that its spec matches the model.

`load_model(spec)` is the one way tasks get a model: it names the file and passes on
MuJoCo's message when loading fails, then runs `validate_spec`. `validate_spec` first
checks that every name the spec mentions exists (listing the closest valid names when
not), then that the numbers agree: joint ranges, PD gains, force limits and the keyframe's
joint positions. A spec and an MJCF that drift apart fail here, not as a silently wrong
policy.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import mujoco
import numpy as np

from .spec import RobotSpec

_TOL = 1e-6
# MuJoCo's enums do not compare equal to numpy integers inside `in`; compare plain ints.
_HINGE = int(mujoco.mjtJoint.mjJNT_HINGE)
_SLIDE = int(mujoco.mjtJoint.mjJNT_SLIDE)


class RobotModelError(ValueError):
    """A robot's MJCF could not be loaded, or its spec does not match the model."""


def load_model(spec: RobotSpec) -> mujoco.MjModel:
    """Compile `spec.mjcf` and validate the spec against it."""
    path = Path(spec.mjcf)
    if not path.is_file():
        raise FileNotFoundError(
            f"robot {spec.name!r}: MJCF file {path} does not exist"
            + ("" if path.parent.is_dir() else f" (nor does its folder {path.parent})")
        )
    try:
        model = mujoco.MjModel.from_xml_path(str(path))
    except ValueError as exc:  # MuJoCo reports XML and compile errors as ValueError.
        raise RobotModelError(f"robot {spec.name!r}: MuJoCo could not load {path}: {exc}") from exc
    validate_spec(spec, model)
    return model


def model_names(model: mujoco.MjModel, obj: mujoco.mjtObj) -> list[str]:
    """All names of one object type (joints, actuators, ...) in id order; unnamed ones skipped."""
    count = {
        mujoco.mjtObj.mjOBJ_JOINT: model.njnt,
        mujoco.mjtObj.mjOBJ_ACTUATOR: model.nu,
        mujoco.mjtObj.mjOBJ_SENSOR: model.nsensor,
        mujoco.mjtObj.mjOBJ_SITE: model.nsite,
        mujoco.mjtObj.mjOBJ_GEOM: model.ngeom,
        mujoco.mjtObj.mjOBJ_BODY: model.nbody,
        mujoco.mjtObj.mjOBJ_KEY: model.nkey,
    }[obj]
    names = (mujoco.mj_id2name(model, obj, i) for i in range(count))
    return [n for n in names if n]


def validate_spec(spec: RobotSpec, model: mujoco.MjModel) -> None:
    """Raise RobotModelError (a ValueError) listing every way `spec` disagrees with `model`."""
    missing = _missing_names(spec, model)
    if missing:
        raise RobotModelError(
            f"robot {spec.name!r}: {len(missing)} name(s) in the spec are not in "
            f"{spec.mjcf}:\n  " + "\n  ".join(missing)
        )
    problems = _mismatches(spec, model)
    if problems:
        raise RobotModelError(
            f"robot {spec.name!r}: the spec does not match {spec.mjcf}:\n  " + "\n  ".join(problems)
        )


def _missing_names(spec: RobotSpec, model: mujoco.MjModel) -> list[str]:
    """One line per spec name absent from the model, with the closest valid names."""
    obj = mujoco.mjtObj
    wanted: list[tuple[str, mujoco.mjtObj, str]] = []  # (field, object type, name)
    wanted += [("joint_names", obj.mjOBJ_JOINT, n) for n in spec.joint_names]
    wanted += [("actuator_names", obj.mjOBJ_ACTUATOR, n) for n in spec.actuator_names]
    wanted += [(f"sensors[{r!r}]", obj.mjOBJ_SENSOR, n) for r, n in spec.sensors.items()]
    wanted += [(f"sites[{r!r}]", obj.mjOBJ_SITE, n) for r, n in spec.sites.items()]
    wanted += [(f"bodies[{r!r}]", obj.mjOBJ_BODY, n) for r, n in spec.bodies.items()]
    wanted += [("feet", obj.mjOBJ_GEOM, n) for n in spec.feet]
    if spec.base_body is not None:
        wanted.append(("base_body", obj.mjOBJ_BODY, spec.base_body))
    if spec.end_effector_site is not None:
        wanted.append(("end_effector_site", obj.mjOBJ_SITE, spec.end_effector_site))
    if spec.gripper_actuator is not None:
        wanted.append(("gripper_actuator", obj.mjOBJ_ACTUATOR, spec.gripper_actuator))
    if spec.keyframe is not None:
        wanted.append(("keyframe", obj.mjOBJ_KEY, spec.keyframe))

    lines = []
    for field_name, kind, name in wanted:
        if mujoco.mj_name2id(model, kind, name) >= 0:
            continue
        kind_word = kind.name.removeprefix("mjOBJ_").lower()
        lines.append(
            f"{field_name}: {kind_word} {name!r} not found; "
            f"{_closest(name, model_names(model, kind), kind_word)}"
        )
    return lines


def _closest(name: str, valid: list[str], kind_word: str) -> str:
    if not valid:
        return f"the model has no named {kind_word}s"
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.4)
    if close:
        return f"closest valid {kind_word} names: {', '.join(close)}"
    shown = ", ".join(valid[:8]) + (", ..." if len(valid) > 8 else "")
    return f"valid {kind_word} names: {shown}"


def _mismatches(spec: RobotSpec, model: mujoco.MjModel) -> list[str]:
    """Names all exist; check the numbers and wiring agree."""
    obj = mujoco.mjtObj
    out: list[str] = []
    key_id = (
        mujoco.mj_name2id(model, obj.mjOBJ_KEY, spec.keyframe) if spec.keyframe is not None else -1
    )
    for i, (jname, aname) in enumerate(zip(spec.joint_names, spec.actuator_names, strict=True)):
        j = mujoco.mj_name2id(model, obj.mjOBJ_JOINT, jname)
        a = mujoco.mj_name2id(model, obj.mjOBJ_ACTUATOR, aname)
        if int(model.jnt_type[j]) not in (_HINGE, _SLIDE):
            out.append(f"joint {jname!r} is not a hinge or slide joint")
            continue
        trn_ok = (
            int(model.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT)
            and model.actuator_trnid[a, 0] == j
        )
        if not trn_ok:
            out.append(f"actuator {aname!r} does not drive joint {jname!r}")
        lo, hi = model.jnt_range[j]
        if not model.jnt_limited[j]:
            out.append(
                f"joint {jname!r} has no range in the MJCF; spec says [{spec.joint_lower[i]}, {spec.joint_upper[i]}]"
            )
        elif abs(lo - spec.joint_lower[i]) > _TOL or abs(hi - spec.joint_upper[i]) > _TOL:
            out.append(
                f"joint {jname!r}: range [{lo:g}, {hi:g}] in the MJCF, "
                f"[{spec.joint_lower[i]:g}, {spec.joint_upper[i]:g}] in the spec"
            )
        out += _actuator_mismatches(spec, model, i, a)
        if key_id >= 0:
            q = model.key_qpos[key_id, model.jnt_qposadr[j]]
            if abs(q - spec.default_pose[i]) > _TOL:
                out.append(
                    f"keyframe {spec.keyframe!r}: joint {jname!r} is {q:g}, "
                    f"default_pose says {spec.default_pose[i]:g}"
                )
            ctrl = model.key_ctrl[key_id, a]
            want = spec.default_pose[i] if spec.control_mode == "position" else 0.0
            if abs(ctrl - want) > _TOL:
                out.append(
                    f"keyframe {spec.keyframe!r}: ctrl of actuator {aname!r} is {ctrl:g}, expected {want:g}"
                )
    if spec.base_body is not None:
        b = mujoco.mj_name2id(model, obj.mjOBJ_BODY, spec.base_body)
        free = [
            j
            for j in range(model.body_jntadr[b], model.body_jntadr[b] + model.body_jntnum[b])
            if int(model.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_FREE)
        ]
        if not free:
            out.append(f"base_body {spec.base_body!r} has no free joint")
    out += _unlisted_actuators(spec, model)
    return out


def _actuator_mismatches(spec: RobotSpec, model: mujoco.MjModel, i: int, a: int) -> list[str]:
    aname = spec.actuator_names[i]
    gain, bias = model.actuator_gainprm[a], model.actuator_biasprm[a]
    out = []
    if spec.control_mode == "position":
        is_position = (
            int(model.actuator_gaintype[a]) == int(mujoco.mjtGain.mjGAIN_FIXED)
            and int(model.actuator_biastype[a]) == int(mujoco.mjtBias.mjBIAS_AFFINE)
            and abs(bias[1] + gain[0]) <= _TOL
        )
        if not is_position:
            out.append(f"actuator {aname!r} is not a position actuator (control_mode 'position')")
        elif abs(gain[0] - spec.kp[i]) > _TOL or abs(-bias[2] - spec.kd[i]) > _TOL:
            out.append(
                f"actuator {aname!r}: kp={gain[0]:g}, kv={-bias[2]:g} in the MJCF, "
                f"kp={spec.kp[i]:g}, kd={spec.kd[i]:g} in the spec"
            )
        limited = bool(model.actuator_forcelimited[a])
        lo, hi = model.actuator_forcerange[a]
        if (
            not limited
            or abs(hi - spec.effort_limit[i]) > _TOL
            or abs(lo + spec.effort_limit[i]) > _TOL
        ):
            shown = f"[{lo:g}, {hi:g}]" if limited else "unlimited"
            out.append(
                f"actuator {aname!r}: force range {shown} in the MJCF, "
                f"+-{spec.effort_limit[i]:g} in the spec"
            )
    else:
        if int(model.actuator_biastype[a]) != int(mujoco.mjtBias.mjBIAS_NONE):
            out.append(f"actuator {aname!r} is not a motor (control_mode 'force')")
        peak = abs(model.actuator_gear[a, 0]) * np.abs(model.actuator_ctrlrange[a]).max()
        if not model.actuator_ctrllimited[a] or abs(peak - spec.effort_limit[i]) > _TOL:
            out.append(
                f"actuator {aname!r}: gear x ctrlrange gives at most {peak:g}, "
                f"effort_limit says {spec.effort_limit[i]:g}"
            )
    return out


def _unlisted_actuators(spec: RobotSpec, model: mujoco.MjModel) -> list[str]:
    listed = set(spec.actuator_names)
    if spec.gripper_actuator is not None:
        if spec.gripper_actuator in listed:
            return [f"gripper_actuator {spec.gripper_actuator!r} is also in actuator_names"]
        listed.add(spec.gripper_actuator)
    extra = [n for n in model_names(model, mujoco.mjtObj.mjOBJ_ACTUATOR) if n not in listed]
    unnamed = model.nu - len(model_names(model, mujoco.mjtObj.mjOBJ_ACTUATOR))
    out = [f"actuator {n!r} is in the MJCF but not in the spec" for n in extra]
    if unnamed:
        out.append(f"{unnamed} unnamed actuator(s) in the MJCF; name them and list them")
    return out
