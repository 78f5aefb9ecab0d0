"""The tabletop manipulation family's shared machinery: end-effector actions, observation
groups (proprioception, privileged state, camera images, instruction tokens), per-episode
colours, lights and camera jitter (`tabletop_looks`), and instructions. The config is in
`tabletop_config`. Each task (arm_pick_place, ...) adds
its objects, its episode sampling, its success test and its instruction templates.

Actions (5, each in [-1, 1]) move an end-effector setpoint: dx, dy, dz (world frame, up to
`max_step` m per control step), a yaw change (up to `max_yaw_step` rad) of the downward-
pointing hand, and the gripper (-1 closed, +1 open). The setpoint is kept within
`max_lead` of the measured fingertip (no wind-up against the table or a wall), and the
task turns it into joint targets for the arm's position servos with one damped
least-squares step on the hand's Jacobian (`mujoco.batch` `jac`), the hand held pointing
down and the redundant joint pulled toward the ready pose. A zero action holds the
setpoint, so the arm settles where it was sent; the setpoint is part of the proprioceptive
observation. See docs/decisions/0032-tabletop-tasks.md for the measurements.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import mujoco
import numpy as np

from unilab.robots import get_robot
from unilab.robots.spec import RobotSpec
from unilab.robots.validate import validate_spec
from unilab.sim.render import BatchRenderer, RenderSettings, camera_ids
from unilab.tasks.base import DEPTH_PREFIX, IMAGE_PREFIX, INSTRUCTION, ObsSpec, Task
from unilab.tasks.instructions import InstructionTable, InstructionTemplates, Vocabulary
from unilab.tasks.tabletop_config import PROPRIO_PARTS, TabletopConfig
from unilab.tasks.tabletop_geometry import cos_sin, rotation_z, wrap_angle
from unilab.tasks.tabletop_looks import TabletopLooks
from unilab.tasks.tabletop_scene import (
    COLOUR_NAMES,
    CUBE_HALF,
    FINGER_PADS,
    TABLETOP_XML,
    SceneLayout,
    bowl_name,
    build_scene,
    cube_name,
    touch_sensor_name,
)
from unilab.tasks.vocabulary import WORDS

TABLETOP_ARM = replace(
    get_robot("arm"),
    mjcf=TABLETOP_XML,
    sensors={"ee_position": "ee_pos", "ee_orientation": "ee_quat"},
    bodies={},
    sites={},
)
"""The arm's spec without the single-cube scene's roles (the family adds its own objects)."""
GRIPPER_OPEN = 0.04
"""Gripper actuator target (m per finger) that holds the hand fully open."""
WORKSPACE_LOW = np.array([0.2, -0.45, 0.02])
WORKSPACE_HIGH = np.array([0.8, 0.45, 0.5])
"""End-effector targets are clamped into this box (m, base frame; table top z = 0)."""
YAW_LIMIT = np.pi / 2 + 0.35
"""Hand yaw targets are clamped to +- this (rad) around the ready pose's yaw."""
_DOWN = np.diag([1.0, -1.0, -1.0])
"""Hand orientation at yaw 0: x forward, fingers opening along y, z pointing down."""
_DLS_DAMPING = 0.05
_NULLSPACE_GAIN = 0.2
_MAX_JOINT_STEP = 0.4


class TabletopTask(TabletopLooks, Task):
    """A tabletop manipulation task: subclasses set `layout`, `templates`, `num_named` and
    implement sample_episode, instruction_values, success and task_state."""

    robot: ClassVar[RobotSpec] = TABLETOP_ARM
    control_dt: ClassVar[float] = 0.05
    action_clip: ClassVar[float] = 1.0
    layout: ClassVar[SceneLayout]
    templates: ClassVar[InstructionTemplates]
    num_named: ClassVar[int] = 1
    """Cubes the instruction names (cube0..); the rest are distractors."""
    vocabulary: ClassVar[tuple[str, ...]] = WORDS
    default_reward_weights: ClassVar[dict[str, float]] = {
        "reach": 0.5,
        "place": 1.0,
        "success": 10.0,
        "action_rate": -0.01,
    }
    state_attrs: ClassVar[tuple[str, ...]] = (
        "cube_colour",
        "extra_colour",
        "instruction_index",
        "colour_noise",
        "light_scale",
        "light_tilt",
        "camera_offset",
        "camera_turn",
        "ee_target",
        "ee_target_yaw",
    )

    cfg: TabletopConfig

    def __init__(self, cfg: TabletopConfig, **kwargs: Any) -> None:
        self._check_config(cfg)
        self.action_dim = 5
        self.num_cubes = self.num_named + cfg.num_distractors
        super().__init__(cfg, **kwargs)
        m, spec, n = self.model, self.robot, self.num_envs
        self._qpos_adr = np.array([int(m.joint(j).qposadr[0]) for j in spec.joint_names])
        self._dof_adr = np.array([int(m.joint(j).dofadr[0]) for j in spec.joint_names])
        self._arm_act = np.array([m.actuator(a).id for a in spec.actuator_names])
        assert spec.gripper_actuator is not None and spec.end_effector_site is not None
        self._gripper_act = m.actuator(spec.gripper_actuator).id
        self._ee_site = m.site(spec.end_effector_site).id
        self._hand = m.body("hand").id
        self._fingers = np.array(
            [int(m.joint(j).qposadr[0]) for j in ("finger_left", "finger_right")]
        )
        self._default_pose = np.asarray(spec.default_pose, dtype=np.float64)
        self._ctrl_low = m.actuator_ctrlrange[self._arm_act, 0].copy()
        self._ctrl_high = m.actuator_ctrlrange[self._arm_act, 1].copy()
        self._home_qpos = m.key_qpos[m.key("home").id].copy()
        self._ctrl = np.zeros((n, m.nu), dtype=np.float64)
        self.ee_target = self.ee_pos.copy()
        """(n, 3) end-effector position setpoint, moved by the actions."""
        self.ee_target_yaw = self.ee_yaw.copy()
        """(n,) hand yaw setpoint (rad)."""

        self._cube_body = np.array([m.body(cube_name(i)).id for i in range(self.num_cubes)])
        self._cube_geom = np.array([m.geom(cube_name(i)).id for i in range(self.num_cubes)])
        self._cube_qpos = np.array(
            [int(m.joint(cube_name(i)).qposadr[0]) for i in range(self.num_cubes)]
        )
        self._cube_dof = np.array(
            [int(m.joint(cube_name(i)).dofadr[0]) for i in range(self.num_cubes)]
        )
        # (n, 2 pads, cubes) "found" flags of the pad-cube contact sensors (live views).
        touch = [
            [self.sim.sensor(touch_sensor_name(p, i)) for i in range(self.num_cubes)]
            for p in FINGER_PADS
        ]
        self._touch = [[view[:, 0] for view in row] for row in touch]
        self._mocap_pos = self.sim.bind("mocap_pos") if m.nmocap else None
        self._mocap_id = {
            name: int(m.body_mocapid[m.body(name).id]) for name in self._mocap_names()
        }

        self.instructions = InstructionTable(
            self.templates, cfg.instruction_length, Vocabulary(self.vocabulary)
        )
        self.cube_colour = np.zeros((n, self.num_cubes), dtype=np.int64)
        """(n, cubes) palette index of each cube's colour (COLOUR_NAMES)."""
        self.instruction_index = np.zeros(n, dtype=np.int64)
        """(n,) index of each env's instruction in self.instructions.texts."""
        self._init_looks()

        self.renderer = None
        if cfg.cameras:
            size = cfg.image_size
            self.renderer = BatchRenderer(
                self.sim,
                list(cfg.cameras),
                RenderSettings(width=size, height=size, depth=cfg.depth, shadows=cfg.shadows),
            )
        self._push_visuals(np.arange(n))

    # -- configuration ------------------------------------------------------------------
    def _check_config(self, cfg: TabletopConfig) -> None:
        problems = []
        if not 8 <= cfg.image_size <= 1024:
            problems.append(f"image_size={cfg.image_size} must be in 8..1024")
        if cfg.num_distractors < 0:
            problems.append(f"num_distractors={cfg.num_distractors} must be >= 0")
        unknown = [p for p in cfg.proprio if p not in PROPRIO_PARTS]
        if unknown or len(set(cfg.proprio)) != len(cfg.proprio) or not cfg.proprio:
            problems.append(
                f"proprio={list(cfg.proprio)} must name distinct parts among "
                f"{', '.join(PROPRIO_PARTS)} (at least one)"
            )
        if self.num_named + cfg.num_distractors > len(COLOUR_NAMES) - 2:
            problems.append(
                f"num_distractors={cfg.num_distractors} leaves too few colours: at most "
                f"{len(COLOUR_NAMES) - 2 - self.num_named}"
            )
        for name in ("max_step", "max_yaw_step"):
            if getattr(cfg, name) <= 0:
                problems.append(f"{name}={getattr(cfg, name)} must be > 0")
        for name in (
            "init_joint_noise",
            "colour_jitter",
            "light_jitter",
            "light_direction_jitter",
            "camera_position_jitter",
            "camera_angle_jitter",
        ):
            if getattr(cfg, name) < 0:
                problems.append(f"{name}={getattr(cfg, name)} must be >= 0")
        if problems:
            raise ValueError(f"task {cfg.name!r}: " + "; ".join(problems))

    def build_model(self) -> mujoco.MjModel:
        layout = SceneLayout(
            num_cubes=self.num_named + self.cfg.num_distractors,
            num_bowls=self.layout.num_bowls,
            wall=self.layout.wall,
            goal_marker=self.layout.goal_marker,
        )
        model = build_scene(layout)
        validate_spec(self.robot, model)
        if self.cfg.cameras:
            try:
                camera_ids(model, list(self.cfg.cameras))
            except (ValueError, TypeError) as exc:
                raise ValueError(
                    f"task {self.cfg.name!r}: cameras={list(self.cfg.cameras)}: {exc}"
                ) from None
        return model

    def _mocap_names(self) -> list[str]:
        names = [bowl_name(b) for b in range(self.layout.num_bowls)]
        if self.layout.wall:
            names.append("wall")
        if self.layout.goal_marker:
            names.append("goal")
        return names

    # -- state views --------------------------------------------------------------------
    @property
    def joint_pos(self) -> np.ndarray:
        return self.sim.qpos[:, self._qpos_adr]

    @property
    def joint_vel(self) -> np.ndarray:
        return self.sim.qvel[:, self._dof_adr]

    @property
    def ee_pos(self) -> np.ndarray:
        """(n, 3) fingertip centre, world (= base) frame."""
        return self.sim.site_xpos[:, self._ee_site]

    @property
    def ee_rot(self) -> np.ndarray:
        """(n, 3, 3) hand orientation (columns: hand x, y = finger axis, z = finger direction)."""
        return self.sim.site_xmat[:, self._ee_site].reshape(-1, 3, 3)

    @property
    def ee_yaw(self) -> np.ndarray:
        """(n,) yaw of the hand's x axis about world z (0 at the ready pose)."""
        rot = self.ee_rot
        return np.arctan2(rot[:, 1, 0], rot[:, 0, 0])

    @property
    def gripper_opening(self) -> np.ndarray:
        """(n,) mean finger slide (m): 0 closed, 0.04 open."""
        return self.sim.qpos[:, self._fingers].mean(axis=1)

    @property
    def cube_pos(self) -> np.ndarray:
        """(n, cubes, 3) cube centres."""
        return self.sim.xpos[:, self._cube_body]

    @property
    def cube_quat(self) -> np.ndarray:
        q = self.sim.xquat[:, self._cube_body]
        return np.where(q[..., :1] < 0.0, -q, q)

    @property
    def cube_yaw(self) -> np.ndarray:
        """(n, cubes) yaw of each cube folded into [-pi/4, pi/4) (cubes look the same every
        quarter turn; meaningful while a cube rests flat)."""
        q = self.cube_quat
        yaw = np.arctan2(
            2 * (q[..., 0] * q[..., 3] + q[..., 1] * q[..., 2]),
            1 - 2 * (q[..., 2] ** 2 + q[..., 3] ** 2),
        )
        return (yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4

    @property
    def cube_vel(self) -> np.ndarray:
        """(n, cubes, 3) linear velocities (world frame)."""
        return self.sim.qvel[:, self._cube_dof[:, None] + np.arange(3)]

    def mocap_position(self, name: str) -> np.ndarray:
        """(n, 3) position of a mocap body (bowl0, wall, goal, ...), as placed at reset."""
        assert self._mocap_pos is not None
        return self._mocap_pos[:, self._mocap_id[name]]

    def touching(self, cube: int) -> np.ndarray:
        """(n,) bool: either finger pad touches the cube."""
        return (self._touch[0][cube] > 0) | (self._touch[1][cube] > 0)

    def grasped(self, cube: int) -> np.ndarray:
        """(n,) bool: both finger pads touch the cube."""
        return (self._touch[0][cube] > 0) & (self._touch[1][cube] > 0)

    def grasp_matrix(self) -> np.ndarray:
        """(n, cubes) bool: both finger pads touch the cube."""
        left = np.stack(self._touch[0], axis=1) > 0
        right = np.stack(self._touch[1], axis=1) > 0
        return left & right

    def grasped_any(self, cube: np.ndarray) -> np.ndarray:
        """(n,) bool: each env's cube (an index per env) is between both finger pads."""
        return self.grasp_matrix()[np.arange(self.num_envs), cube]

    def settled(self, cube: int, speed: float = 0.05) -> np.ndarray:
        """(n,) bool: the cube is untouched by the hand and (nearly) at rest."""
        return ~self.touching(cube) & (np.linalg.norm(self.cube_vel[:, cube], axis=1) < speed)

    # -- actions ------------------------------------------------------------------------
    def action_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        ee = self.ee_pos.copy()
        rot = self.ee_rot
        target = np.clip(
            self.ee_target + cfg.max_step * actions[:, :3], WORKSPACE_LOW, WORKSPACE_HIGH
        )
        lead = target - ee
        dist = np.linalg.norm(lead, axis=1, keepdims=True)
        target = ee + lead * np.minimum(1.0, cfg.max_lead / np.maximum(dist, 1e-9))
        yaw = np.arctan2(rot[:, 1, 0], rot[:, 0, 0])
        target_yaw = np.clip(
            self.ee_target_yaw + cfg.max_yaw_step * actions[:, 3], -YAW_LIMIT, YAW_LIMIT
        )
        target_yaw = yaw + np.clip(
            wrap_angle(target_yaw - yaw), -cfg.max_yaw_lead, cfg.max_yaw_lead
        )
        self.ee_target, self.ee_target_yaw = target, target_yaw
        target_rot = rotation_z(target_yaw) @ _DOWN
        err = np.concatenate(
            [target - ee, 0.5 * np.cross(rot, target_rot, axis=1).sum(axis=2)], axis=1
        )
        jacp, jacr = self.sim.batch.jac(self._hand, ee)
        jac = np.concatenate([jacp, jacr], axis=1)[:, :, self._dof_adr]  # (n, 6, 7)
        jac_t = jac.transpose(0, 2, 1)
        gram = jac @ jac_t + (_DLS_DAMPING**2) * np.eye(6)
        pinv = jac_t @ np.linalg.inv(gram)  # (n, 7, 6), damped pseudo-inverse
        q = self.joint_pos
        dq = (pinv @ err[..., None])[..., 0]
        null = np.eye(7) - pinv @ jac
        dq += (null @ (_NULLSPACE_GAIN * (self._default_pose - q))[..., None])[..., 0]
        dq = np.clip(dq, -_MAX_JOINT_STEP, _MAX_JOINT_STEP)
        self._ctrl[:, self._arm_act] = np.clip(q + dq, self._ctrl_low, self._ctrl_high)
        self._ctrl[:, self._gripper_act] = GRIPPER_OPEN * 0.5 * (1.0 + actions[:, 4])
        return self._ctrl

    # -- observations -------------------------------------------------------------------
    def proprio(self) -> np.ndarray:
        """(n, d): the configured parts of joint positions (from the ready pose) and
        velocities, gripper opening (0 closed, 1 open), fingertip position and hand yaw
        (cos, sin), the setpoint's position and yaw (cos, sin), previous action."""
        parts = {
            "joint_pos": lambda: self.joint_pos - self._default_pose,
            "joint_vel": lambda: self.joint_vel,
            "gripper": lambda: self.gripper_opening[:, None] / GRIPPER_OPEN,
            "ee_pos": lambda: self.ee_pos,
            "ee_yaw": lambda: cos_sin(self.ee_yaw),
            "ee_target": lambda: self.ee_target,
            "ee_target_yaw": lambda: cos_sin(self.ee_target_yaw),
            "previous_action": lambda: self.actions,
        }
        return np.concatenate([parts[p]() for p in self.cfg.proprio], axis=1, dtype=np.float32)

    def privileged(self) -> np.ndarray:
        """(n, d) object state no camera-only policy sees: every cube's position,
        orientation and velocity, the mocap objects' positions, which cubes the instruction
        names (one-hot per named role) and the task's own features."""
        n = self.num_envs
        parts = [
            self.cube_pos.reshape(n, -1),
            self.cube_quat.reshape(n, -1),
            self.cube_vel.reshape(n, -1),
        ]
        if self._mocap_pos is not None:
            parts.append(self._mocap_pos.reshape(n, -1))
        parts.extend(self.task_state())
        return np.concatenate(parts, axis=1, dtype=np.float32)

    def critic_parts(self, state: np.ndarray) -> dict[str, np.ndarray]:
        """Split `critic` observation vectors (B, D) into what `privileged` concatenates:
        `proprio` (B, P), `cube_pos` (B, C, 3), `cube_quat` (B, C, 4), `cube_vel` (B, C, 3),
        `mocap_pos` (B, M, 3) and `task_state` (B, rest)."""
        state = np.asarray(state)
        proprio = self.proprio().shape[1]
        cubes = self.num_cubes
        mocap = 0 if self._mocap_pos is None else self._mocap_pos.shape[1]
        fixed = proprio + cubes * 10 + mocap * 3
        task = sum(part.shape[1] for part in self.task_state())
        if state.ndim != 2 or state.shape[1] != fixed + task:
            raise ValueError(
                f"task {self.cfg.name!r}: critic state of shape {state.shape}; expected "
                f"(B, {fixed + task}): {proprio} proprioception (task.proprio), {cubes} cubes "
                f"x (3 position + 4 orientation + 3 velocity), {mocap} mocap positions, "
                f"{task} task features"
            )
        b, at = len(state), np.cumsum([0, proprio, cubes * 3, cubes * 4, cubes * 3, mocap * 3])
        return {
            "proprio": state[:, : at[1]],
            "cube_pos": state[:, at[1] : at[2]].reshape(b, cubes, 3),
            "cube_quat": state[:, at[2] : at[3]].reshape(b, cubes, 4),
            "cube_vel": state[:, at[3] : at[4]].reshape(b, cubes, 3),
            "mocap_pos": state[:, at[4] : at[5]].reshape(b, mocap, 3),
            "task_state": state[:, at[5] :],
        }

    def observe(self) -> dict[str, np.ndarray]:
        obs = self._vector_obs()
        obs[INSTRUCTION] = self.instructions.ids[self.instruction_index]
        if self.renderer is not None:
            obs.update(self._images(None))
        return obs

    def _vector_obs(self) -> dict[str, np.ndarray]:
        proprio, privileged = self.proprio(), self.privileged()
        critic = np.concatenate([proprio, privileged], axis=1)
        return {"policy": critic if self.cfg.state_policy else proprio, "critic": critic}

    def _images(self, ids: np.ndarray | None) -> dict[str, np.ndarray]:
        assert self.renderer is not None
        frames = self.renderer.render(ids)
        out = {IMAGE_PREFIX + cam: img for cam, img in frames.items()}
        out.update(
            {DEPTH_PREFIX + cam: d[..., None] for cam, d in self.renderer.last_depth.items()}
        )
        return out

    def observe_after_reset(
        self, ids: np.ndarray, obs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        new = self._vector_obs()
        new[INSTRUCTION] = self.instructions.ids[self.instruction_index]
        if self.renderer is not None:
            for name, rows in self._images(ids).items():
                images = obs[name]
                images[ids] = rows
                new[name] = images
        return new

    def observation_spec(self) -> dict[str, ObsSpec]:
        proprio = sum(PROPRIO_PARTS[p] for p in self.cfg.proprio)
        critic = proprio + self.privileged().shape[1]
        spec = {
            "policy": ObsSpec((critic if self.cfg.state_policy else proprio,), "float32"),
            "critic": ObsSpec((critic,), "float32"),
            INSTRUCTION: ObsSpec((self.cfg.instruction_length,), "int64"),
        }
        size = self.cfg.image_size
        for cam in self.cfg.cameras:
            spec[IMAGE_PREFIX + cam] = ObsSpec((size, size, 3), "uint8")
            if self.cfg.depth:
                spec[DEPTH_PREFIX + cam] = ObsSpec((size, size, 1), "float32")
        return spec

    def instruction_text(self, env_ids: np.ndarray | None = None) -> list[str]:
        """The instruction of each env (all envs when env_ids is None)."""
        idx = self.instruction_index if env_ids is None else self.instruction_index[env_ids]
        return [self.instructions.texts[i] for i in idx.tolist()]

    def episode_info(self, env_ids: np.ndarray) -> list[dict[str, Any]]:
        """Per-env episode metadata: instruction text and index, cube colours by name."""
        texts = self.instruction_text(env_ids)
        return [
            {
                "instruction": text,
                "instruction_index": int(self.instruction_index[e]),
                "cube_colours": [COLOUR_NAMES[c] for c in self.cube_colour[e].tolist()],
            }
            for e, text in zip(np.asarray(env_ids).tolist(), texts, strict=True)
        ]

    # -- rewards, success ---------------------------------------------------------------
    def reward_reach(self) -> np.ndarray:
        obj, _ = self.object_and_goal()
        return 1.0 - np.tanh(np.linalg.norm(obj - self.ee_pos, axis=1) / 0.1)

    def reward_place(self) -> np.ndarray:
        obj, goal = self.object_and_goal()
        return 1.0 - np.tanh(np.linalg.norm(goal - obj, axis=1) / 0.1)

    def reward_success(self) -> np.ndarray:
        return self.success().astype(np.float64)

    def reward_action_rate(self) -> np.ndarray:
        return np.sum(np.square(self.actions - self.prev_actions), axis=1)

    def terminations(self) -> dict[str, np.ndarray]:
        off_table: np.ndarray = np.any(self.cube_pos[:, :, 2] < -0.05, axis=1)
        reasons = {"cube_off_table": off_table}
        if self.cfg.terminate_on_success:
            reasons["success"] = self.success()
        return reasons

    def task_metrics(self) -> dict[str, np.ndarray]:
        return {"success": self.success().astype(np.float32)}

    # -- to implement per task ------------------------------------------------------------
    def sample_episode(self, ids: np.ndarray, qpos: np.ndarray) -> None:
        """Place this episode's objects for envs ids: cube poses into qpos (k, nq) rows,
        mocap bodies through set_mocap (called after the sim reset), task state arrays."""
        raise NotImplementedError

    def place_mocap(self, ids: np.ndarray) -> None:
        """Write this episode's mocap positions (bowls, wall, goal) for envs ids."""

    def instruction_values(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Slot value indices (into self.templates.slots[slot]) of each env's instruction."""
        raise NotImplementedError

    def success(self) -> np.ndarray:
        raise NotImplementedError

    def object_and_goal(self) -> tuple[np.ndarray, np.ndarray]:
        """(n, 3) position of the object to move and (n, 3) where it should go (rewards)."""
        raise NotImplementedError

    def task_state(self) -> list[np.ndarray]:
        """Extra privileged features, (n, d) arrays."""
        return []

    # -- resets -------------------------------------------------------------------------
    def reset_envs(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        k = len(ids)
        qpos = np.tile(self._home_qpos, (k, 1))
        noise = self.rng.uniform(-self.cfg.init_joint_noise, self.cfg.init_joint_noise, (k, 7))
        qpos[:, self._qpos_adr] = np.clip(
            self._default_pose + noise, self._ctrl_low, self._ctrl_high
        )
        self.sample_episode(ids, qpos)
        self.sim.reset(ids, qpos=qpos, qvel=np.zeros(self.model.nv))
        self.ee_target[ids] = self.ee_pos[ids]
        self.ee_target_yaw[ids] = self.ee_yaw[ids]
        self.place_mocap(ids)
        self._draw_looks(ids)
        values = self.instruction_values(ids)
        self.instruction_index[ids] = self.instructions.draw(self.rng, k, **values)
        self._push_visuals(ids)

    def set_cube_poses(self, qpos: np.ndarray, cube: int, xy: np.ndarray, yaw: np.ndarray) -> None:
        """Write a cube resting on the table at xy (k, 2) with yaw (k,) into qpos rows."""
        a = self._cube_qpos[cube]
        qpos[:, a : a + 2] = xy
        qpos[:, a + 2] = CUBE_HALF
        qpos[:, a + 3 : a + 7] = 0.0
        qpos[:, a + 3] = np.cos(yaw / 2)
        qpos[:, a + 6] = np.sin(yaw / 2)

    def set_mocap(self, ids: np.ndarray, name: str, xy: np.ndarray) -> None:
        assert self._mocap_pos is not None
        self._mocap_pos[ids, self._mocap_id[name], :2] = xy
        self._mocap_pos[ids, self._mocap_id[name], 2] = 0.0

    def state_restored(self, ids: np.ndarray) -> None:
        self._push_visuals(ids)

    def close(self) -> None:
        """Release the renderer's GL context (also done when the task is collected)."""
        super().close()
        if self.renderer is not None:
            self.renderer.close()
            self.renderer = None
