"""Bring your own robot: any MJCF file becomes a task through config alone.

`task=mjcf task.mjcf_path=PATH` loads the model, derives a `RobotSpec` from it (actuated
joints, default pose from the keyframe or qpos0, gains of position actuators) and trains it
with a generic objective. `forward_velocity` follows gymnasium's Ant-v5: the chosen body's
x velocity plus a healthy bonus minus a control cost (and a contact cost when contact forces
are on), with termination when the body leaves a height range. `none` gives no reward until
terms are switched on with `task.reward_weights`.

Paths: a file path, `gymnasium:<asset>` for a gymnasium MuJoCo asset (e.g.
`gymnasium:ant.xml`), or `robot:<name>` for a unilab robot's scene.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np

from unilab.config.schema import TaskConfig
from unilab.robots.spec import RobotSpec
from unilab.sim.indices import keyframe_id, object_id
from unilab.tasks.base import Task
from unilab.tasks.registry import register_task

ACTION_MODES = ("ctrl", "position")
OBJECTIVES = ("forward_velocity", "none")
# Ant-v5's reward, per second (the base class multiplies by control_dt).
FORWARD_VELOCITY_WEIGHTS = {
    "forward_velocity": 1.0,
    "healthy": 1.0,
    "ctrl_cost": -0.5,
    "contact_cost": -5e-4,
}
# An accelerometer makes MuJoCo compute cfrc_ext (mj_rnePostConstraint) inside each step;
# without a sensor that needs it, cfrc_ext stays zero.
_CFRC_SENSOR = "_unilab_cfrc_probe"


@dataclass
class MjcfConfig(TaskConfig):
    name: str = "mjcf"
    mjcf_path: str = ""
    """MJCF scene (required): a file path, gymnasium:<asset> (e.g. gymnasium:ant.xml) or
    robot:<name> for a unilab robot's scene."""
    control_dt: float = 0.0
    """Seconds per policy action; a whole multiple of the model timestep (0: one timestep)."""
    action_mode: str = "ctrl"
    """ctrl: action in [-1, 1] maps linearly onto each actuator's ctrlrange (motors);
    position: joint target = default pose + action_scale * action (position actuators)."""
    action_scale: float = 0.25
    """position mode: target offset per unit action (rad or m); ctrl mode: ctrl per unit
    action for actuators without a ctrlrange."""
    keyframe: str = ""
    """Keyframe holding the start and default state; empty: the model's qpos0."""
    objective: str = "forward_velocity"
    """forward_velocity: Ant-v5-like locomotion reward; none: all terms off by default."""
    body: str = ""
    """Body whose x velocity is rewarded and whose height is checked; empty: the body of the
    model's first free joint (else the first body)."""
    healthy_z_range: list[float] = field(default_factory=list)
    """[min, max] height (m) of `body` that counts as healthy; empty: always healthy."""
    terminate_when_unhealthy: bool = True
    """End the episode (terminated) when the body leaves healthy_z_range."""
    reset_noise_scale: float = 0.1
    """Reset state = default + uniform(+-scale) on qpos and scale * normal on qvel (Ant-v5)."""
    qvel_clip: float = 10.0
    """Velocities in the observation are clipped to +-qvel_clip (0: no clip)."""
    include_cfrc: bool = False
    """Append every body's external contact wrench (cfrc_ext, world excluded), clipped to
    +-cfrc_clip, to the observation, as Ant-v5 does by default."""
    cfrc_clip: float = 1.0
    """Clip of the contact wrenches in the observation and in contact_cost."""


def resolve_mjcf_path(ref: str) -> Path:
    """The file that `task.mjcf_path` names; errors name the path and what would be valid."""
    if not ref:
        raise ValueError(
            "task.mjcf_path is required for task=mjcf: a file path, gymnasium:<asset> "
            "(e.g. gymnasium:ant.xml) or robot:<name>"
        )
    scheme, sep, rest = ref.partition(":")
    if sep and scheme == "gymnasium":
        spec = importlib.util.find_spec("gymnasium")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(
                f"task.mjcf_path={ref!r} needs the gymnasium package, which is not installed"
            )
        assets = Path(next(iter(spec.submodule_search_locations))) / "envs" / "mujoco" / "assets"
        path = assets / rest
        if not path.is_file():
            found = sorted(p.name for p in assets.glob("*.xml")) if assets.is_dir() else []
            raise FileNotFoundError(
                f"task.mjcf_path={ref!r}: gymnasium has no asset {rest!r} in {assets}; "
                f"available: {', '.join(found) or '(none)'}"
            )
        return path
    if sep and scheme == "robot":
        from unilab.robots import get_robot

        return Path(get_robot(rest).mjcf)
    path = Path(ref).expanduser()
    if not path.is_file():
        where = "" if path.parent.is_dir() else f" (nor does its folder {path.parent})"
        raise FileNotFoundError(f"task.mjcf_path={ref!r}: file {path} does not exist{where}")
    return path


def load_mjcf(ref: str, path: Path, with_cfrc: bool) -> mujoco.MjModel:
    """Compile the MJCF; with_cfrc adds a sensor so that cfrc_ext is computed each step."""
    try:
        spec = mujoco.MjSpec.from_file(str(path))
        if with_cfrc:
            spec.worldbody.add_site(name=_CFRC_SENSOR)
            spec.add_sensor(
                name=_CFRC_SENSOR,
                type=mujoco.mjtSensor.mjSENS_ACCELEROMETER,
                objtype=mujoco.mjtObj.mjOBJ_SITE,
                objname=_CFRC_SENSOR,
            )
        model: mujoco.MjModel = spec.compile()
    except ValueError as exc:  # MuJoCo reports XML and compile errors as ValueError.
        raise ValueError(f"task.mjcf_path={ref!r}: MuJoCo could not load {path}: {exc}") from exc
    if model.nu == 0:
        raise ValueError(f"task.mjcf_path={ref!r}: {path} has no actuators, so nothing to control")
    return model


def _is_position_actuator(model: mujoco.MjModel, i: int) -> bool:
    kp = float(model.actuator_gainprm[i, 0])
    return (
        int(model.actuator_trntype[i]) == int(mujoco.mjtTrn.mjTRN_JOINT)
        and int(model.actuator_biastype[i]) == int(mujoco.mjtBias.mjBIAS_AFFINE)
        and kp > 0.0
        and abs(float(model.actuator_biasprm[i, 1]) + kp) < 1e-9 * max(1.0, kp)
    )


def robot_spec_from_model(
    model: mujoco.MjModel, path: Path, cfg: MjcfConfig, default_qpos: np.ndarray
) -> RobotSpec:
    """A RobotSpec for the model's actuators, in actuator order (the action order)."""
    obj = mujoco.mjtObj
    joint_names, actuator_names, pose, kp, kd, lower, upper, effort = ([] for _ in range(8))
    for i in range(model.nu):
        trn = int(model.actuator_trnid[i, 0])
        is_joint = int(model.actuator_trntype[i]) in (
            int(mujoco.mjtTrn.mjTRN_JOINT),
            int(mujoco.mjtTrn.mjTRN_JOINTINPARENT),
        )
        name = mujoco.mj_id2name(model, obj.mjOBJ_ACTUATOR, i) or f"actuator{i}"
        actuator_names.append(name)
        if is_joint:
            joint_names.append(mujoco.mj_id2name(model, obj.mjOBJ_JOINT, trn) or f"joint{trn}")
            pose.append(float(default_qpos[model.jnt_qposadr[trn]]))
            limited = bool(model.jnt_limited[trn])
            lower.append(float(model.jnt_range[trn, 0]) if limited else -np.inf)
            upper.append(float(model.jnt_range[trn, 1]) if limited else np.inf)
        else:  # tendon or site transmission: no single joint to name
            joint_names.append(name)
            pose.append(0.0)
            lower.append(-np.inf)
            upper.append(np.inf)
        position = _is_position_actuator(model, i)
        kp.append(float(model.actuator_gainprm[i, 0]) if position else 0.0)
        kd.append(-float(model.actuator_biasprm[i, 2]) if position else 0.0)
        if model.actuator_forcelimited[i]:
            effort.append(float(np.max(np.abs(model.actuator_forcerange[i]))))
        elif model.actuator_ctrllimited[i] and not position:
            gear = abs(float(model.actuator_gear[i, 0]))
            effort.append(gear * float(np.max(np.abs(model.actuator_ctrlrange[i]))))
        else:
            effort.append(np.inf)
    free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
    base = (
        mujoco.mj_id2name(model, obj.mjOBJ_BODY, int(model.jnt_bodyid[free[0]]))
        if free.size
        else None
    )
    position_mode = cfg.action_mode == "position"
    return RobotSpec(
        name=path.stem,
        mjcf=path,
        joint_names=tuple(joint_names),
        actuator_names=tuple(actuator_names),
        default_pose=tuple(pose),
        kp=tuple(kp),
        kd=tuple(kd),
        action_scale=cfg.action_scale if position_mode else 1.0,
        joint_lower=tuple(lower),
        joint_upper=tuple(upper),
        effort_limit=tuple(effort),
        base_body=base,
        keyframe=cfg.keyframe or None,
        source=f"derived from {path} by the mjcf task",
        control_mode="position" if position_mode else "force",
    )


def _clip_into(values: np.ndarray, limit: float, out: np.ndarray) -> np.ndarray:
    """out = values clipped to +-limit (limit <= 0: unclipped), cast to out's dtype."""
    if limit <= 0:
        out[...] = values
        return out
    np.minimum(values, limit, out=out, casting="same_kind")
    np.maximum(out, -limit, out=out)
    return out


@register_task("mjcf", MjcfConfig)
class MjcfTask(Task):
    """Any MJCF model (task.mjcf_path) with a generic locomotion objective, no code needed."""

    cfg: MjcfConfig

    def __init__(self, cfg: MjcfConfig, **kwargs: object) -> None:
        self._check_config(cfg)
        # The base reads robot, control_dt and the reward weights from the instance; this
        # task derives them from the model and the config (see build_model).
        names = FORWARD_VELOCITY_WEIGHTS
        weights = names if cfg.objective == "forward_velocity" else dict.fromkeys(names, 0.0)
        if not cfg.include_cfrc and "contact_cost" not in cfg.reward_weights:
            weights = {**weights, "contact_cost": 0.0}
        self.default_reward_weights = weights  # type: ignore[misc]
        super().__init__(cfg, **kwargs)  # type: ignore[arg-type]
        n = self.num_envs
        # cfrc_ext of every body but the world, (n, 6 * (nbody - 1)), as a live view.
        self._cfrc: np.ndarray | None = None
        if self._needs_cfrc:
            self._cfrc = self.sim.bind("cfrc_ext").reshape(n, -1)[:, 6:]
            self._cfrc_clipped = np.empty(self._cfrc.shape)
        nq_obs = len(np.arange(self.model.nq)[self._obs_qpos])
        self._qvel_cols = slice(nq_obs, nq_obs + self.model.nv)
        self._cfrc_cols = slice(self._qvel_cols.stop, None)
        cfrc_dim = 6 * (self.model.nbody - 1) if cfg.include_cfrc else 0
        self._obs_dim = self._qvel_cols.stop + cfrc_dim
        self._x_before = np.zeros(n)
        self._body_x = self.sim.xpos[:, self._body_id, 0]  # live views of the body position
        self._body_z = self.sim.xpos[:, self._body_id, 2]

    @staticmethod
    def _check_config(cfg: MjcfConfig) -> None:
        problems = []
        if cfg.action_mode not in ACTION_MODES:
            problems.append(f"task.action_mode={cfg.action_mode!r}; expected one of {ACTION_MODES}")
        if cfg.objective not in OBJECTIVES:
            problems.append(f"task.objective={cfg.objective!r}; expected one of {OBJECTIVES}")
        if cfg.healthy_z_range and (
            len(cfg.healthy_z_range) != 2 or cfg.healthy_z_range[0] >= cfg.healthy_z_range[1]
        ):
            problems.append(
                f"task.healthy_z_range={list(cfg.healthy_z_range)}; expected [min, max] with "
                "min < max, or [] for no check"
            )
        for key in ("control_dt", "reset_noise_scale", "qvel_clip", "cfrc_clip"):
            if getattr(cfg, key) < 0:
                problems.append(f"task.{key}={getattr(cfg, key)} must be >= 0")
        if problems:
            raise ValueError("task mjcf: " + "; ".join(problems))

    # -- model and spec -------------------------------------------------------------------
    def build_model(self) -> mujoco.MjModel:
        cfg = self.cfg
        path = resolve_mjcf_path(cfg.mjcf_path)
        weight = cfg.reward_weights.get("contact_cost", self.default_reward_weights["contact_cost"])
        self._needs_cfrc = cfg.include_cfrc or weight != 0.0
        model = load_mjcf(cfg.mjcf_path, path, self._needs_cfrc)
        ts = float(model.opt.timestep)
        control_dt = cfg.control_dt or ts
        substeps = round(control_dt / ts)
        if substeps < 1 or abs(substeps * ts - control_dt) > 1e-9:
            raise ValueError(
                f"task.control_dt={cfg.control_dt} is not a whole multiple of the timestep {ts} "
                f"of {path}; use e.g. {ts:g}, {2 * ts:g} or {5 * ts:g}"
            )
        self.control_dt = control_dt  # type: ignore[misc]

        key = self._keyframe(model, path)
        self._default_qpos = model.qpos0.copy() if key < 0 else model.key_qpos[key].copy()
        self._default_qvel = np.zeros(model.nv) if key < 0 else model.key_qvel[key].copy()
        self.robot = robot_spec_from_model(model, path, cfg, self._default_qpos)  # type: ignore[misc]
        self.action_dim = model.nu
        self._body_id = self._tracked_body(model, path)
        self._obs_qpos = self._observed_qpos(model)
        self._setup_actions(model, path)
        return model

    def _keyframe(self, model: mujoco.MjModel, path: Path) -> int:
        if not self.cfg.keyframe:
            return -1
        try:
            return keyframe_id(model, self.cfg.keyframe)
        except KeyError as exc:
            raise ValueError(f"task.keyframe: {exc.args[0]} (in {path})") from None

    def _tracked_body(self, model: mujoco.MjModel, path: Path) -> int:
        if self.cfg.body:
            try:
                return object_id(model, mujoco.mjtObj.mjOBJ_BODY, self.cfg.body)
            except KeyError as exc:
                raise ValueError(f"task.body: {exc.args[0]} (in {path})") from None
        free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        return int(model.jnt_bodyid[free[0]]) if free.size else min(1, model.nbody - 1)

    @staticmethod
    def _observed_qpos(model: mujoco.MjModel) -> slice | np.ndarray:
        """qpos columns in the observation: all but the first free joint's x and y."""
        free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        if not free.size:
            return slice(None)
        adr = int(model.jnt_qposadr[free[0]])
        if adr == 0:
            return slice(2, None)  # the usual case; a slice avoids a gather
        return np.delete(np.arange(model.nq), [adr, adr + 1])

    def _setup_actions(self, model: mujoco.MjModel, path: Path) -> None:
        """ctrl = offset + scale * action, one (nu,) pair for either action mode."""
        if self.cfg.action_mode == "position":
            bad = [
                self.robot.actuator_names[i]
                for i in range(model.nu)
                if not _is_position_actuator(model, i)
            ]
            if bad:
                raise ValueError(
                    f"task.action_mode='position' needs position actuators on joints, but "
                    f"{path} has others: {', '.join(bad)}; use task.action_mode=ctrl"
                )
            self._ctrl_offset = np.asarray(self.robot.default_pose, dtype=np.float64)
            self._ctrl_scale = np.full(model.nu, self.cfg.action_scale)
            return
        lo, hi = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
        limited = model.actuator_ctrllimited.astype(bool)
        self._ctrl_offset = np.where(limited, 0.5 * (lo + hi), 0.0)
        self._ctrl_scale = np.where(limited, 0.5 * (hi - lo), self.cfg.action_scale)

    # -- the task API -----------------------------------------------------------------------
    def action_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        # The last call before physics: remember where the body starts this control step.
        np.copyto(self._x_before, self._body_x)
        return self._ctrl_offset + self._ctrl_scale * actions

    def observe(self) -> dict[str, np.ndarray]:
        # One float32 output filled in place: clipping with minimum/maximum into it is
        # several times cheaper than np.clip and concatenate on these small arrays.
        sim, cfg = self.sim, self.cfg
        out = np.empty((self.num_envs, self._obs_dim), dtype=np.float32)
        out[:, : self._qvel_cols.start] = sim.qpos[:, self._obs_qpos]
        _clip_into(sim.qvel, cfg.qvel_clip, out[:, self._qvel_cols])
        if cfg.include_cfrc:
            assert self._cfrc is not None
            _clip_into(self._cfrc, cfg.cfrc_clip, out[:, self._cfrc_cols])
        return {"policy": out}

    def _healthy(self) -> np.ndarray:
        rng = self.cfg.healthy_z_range
        if not rng:
            return np.ones(self.num_envs, dtype=bool)
        z = self._body_z
        return (z >= rng[0]) & (z <= rng[1])

    def reward_forward_velocity(self) -> np.ndarray:
        result: np.ndarray = (self._body_x - self._x_before) / self.control_dt
        return result

    def reward_healthy(self) -> np.ndarray:
        return self._healthy().astype(np.float64)

    def reward_ctrl_cost(self) -> np.ndarray:
        result: np.ndarray = np.einsum("ij,ij->i", self.actions, self.actions)
        return result

    def reward_contact_cost(self) -> np.ndarray:
        if self._cfrc is None:
            return np.zeros(self.num_envs)
        c = _clip_into(self._cfrc, self.cfg.cfrc_clip, self._cfrc_clipped)
        result: np.ndarray = np.einsum("ij,ij->i", c, c)
        return result

    def terminations(self) -> dict[str, np.ndarray]:
        if not (self.cfg.terminate_when_unhealthy and self.cfg.healthy_z_range):
            return {}
        return {"unhealthy": ~self._healthy()}

    def reset_envs(self, ids: np.ndarray) -> None:
        n, s = len(ids), self.cfg.reset_noise_scale
        m = self.model
        qpos = self._default_qpos + self.rng.uniform(-s, s, (n, m.nq))
        qvel = self._default_qvel + s * self.rng.standard_normal((n, m.nv))
        self.sim.reset(ids, keyframe=self.robot.keyframe, qpos=qpos, qvel=qvel)

    def task_metrics(self) -> dict[str, np.ndarray]:
        return {"body_height": self._body_z.copy()}
