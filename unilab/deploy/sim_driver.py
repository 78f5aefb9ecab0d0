"""`SimDriver`: one env of a registered task as a `RobotDriver`, for a simulated robot host.

The action units are the task's policy units (position robots: joint target = default
pose + action_scale x action). Joint limits are the robot spec's joint range mapped into
those units and intersected with the task's action clip; action entries that are not a
joint (a gripper command) get the clip. `max_step` is a fraction of that range per step.

Cameras: a camera the task itself observes (`images/<cam>`, e.g. a tabletop task's
"front" and "wrist") is served straight from the task's observation: the very frames a
policy trained on this task saw, at every step, with no extra rendering. Any other MJCF
camera by name, and "scene" (a free camera framed on the moving bodies; every task has
it), is rendered from env 0 in a child process with shadows and reflections off
(MUJOCO_GL=egl on a headless machine).

`observe()` holds the vector groups (float32); images travel as camera frames and the
instruction as text (`instruction`), as they do from a real robot.

Torch-free: the task stack and MuJoCo only, so a simulated robot host runs anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np

from unilab.deploy.sim_camera import SCENE_CAMERA, CameraProcess
from unilab.robots.interface import CameraSpec, StepOutcome
from unilab.tasks.base import IMAGE_PREFIX as IMAGE_GROUP_PREFIX

if TYPE_CHECKING:
    from unilab.tasks.base import Task


class SimDriverError(RuntimeError):
    """The simulated robot could not be built or used as asked."""


class SimDriver:
    """A simulated robot over env 0 of `task` (a registered task name or task config)."""

    def __init__(
        self,
        task: str | dict[str, Any],
        *,
        sim_config: dict[str, Any] | None = None,
        seed: int = 0,
        cameras: Sequence[str] = (),
        camera_height: int = 48,
        camera_width: int = 64,
        max_step_fraction: float = 0.25,
    ) -> None:
        self.task_config: dict[str, Any] = {"name": task} if isinstance(task, str) else dict(task)
        self.sim_config = dict(sim_config or {})
        self.seed = seed
        self._camera_names = tuple(cameras)
        self._camera_size = (int(camera_height), int(camera_width))
        if not 0.0 < max_step_fraction <= 1.0:
            raise SimDriverError(f"max_step_fraction={max_step_fraction} must be in (0, 1]")
        self.max_step_fraction = float(max_step_fraction)
        self.task: Task | None = None
        self._obs: dict[str, np.ndarray] = {}
        self._task_cameras: dict[str, CameraSpec] = {}
        """Cameras the task observes itself (served from its `images/<cam>` groups)."""
        self._outcome = StepOutcome()
        self._camera: CameraProcess | None = None
        self._data: mujoco.MjData | None = None
        self._last_action: np.ndarray | None = None

    # ------------------------------------------------------------------ lifecycle
    def connect(self) -> None:
        from unilab.deploy.sim_task import make_task_from_dicts

        if self.task is not None:
            return
        task = make_task_from_dicts(self.task_config, self.sim_config, 1, self.seed)
        self.task = task
        spec = task.robot
        model = task.model
        self._qpos_adr = np.array(
            [int(model.joint(n).qposadr[0]) for n in spec.joint_names], dtype=np.int64
        )
        n_act = int(task.action_dim)
        n_joint = min(len(spec.joint_names), n_act)
        clip = float(task.action_clip)
        low = np.full(n_act, -clip, dtype=np.float64)
        high = np.full(n_act, clip, dtype=np.float64)
        self._position = spec.control_mode == "position"
        if self._position:
            default = np.asarray(spec.default_pose[:n_joint], dtype=np.float64)
            scale = float(spec.action_scale)
            low[:n_joint] = np.maximum(
                low[:n_joint], (np.asarray(spec.joint_lower[:n_joint]) - default) / scale
            )
            high[:n_joint] = np.minimum(
                high[:n_joint], (np.asarray(spec.joint_upper[:n_joint]) - default) / scale
            )
        self._low, self._high = low.astype(np.float32), high.astype(np.float32)
        self._n_joint = n_joint
        names = list(spec.joint_names[:n_joint]) + [f"action_{i}" for i in range(n_joint, n_act)]
        self._action_names = tuple(names)
        self._obs = task.reset()
        observed = {
            g[len(IMAGE_GROUP_PREFIX) :]: v.shape[1:]
            for g, v in self._obs.items()
            if g.startswith(IMAGE_GROUP_PREFIX) and v.ndim == 4
        }
        self._task_cameras = {
            c: CameraSpec(int(observed[c][0]), int(observed[c][1]), int(observed[c][2]))
            for c in self._camera_names
            if c in observed
        }
        unknown = [
            c
            for c in self._camera_names
            if c != SCENE_CAMERA and c not in observed and not _has_camera(model, c)
        ]
        if unknown:
            have = [model.camera(i).name for i in range(model.ncam)]
            raise SimDriverError(
                f"task {task.cfg.name!r} has no camera(s) {unknown}; it has {[*have, SCENE_CAMERA]}"
            )
        self._last_action = np.zeros(n_act, dtype=np.float32)
        self.read_cameras()  # start the camera process now, not inside the control loop

    def disconnect(self) -> None:
        if self._camera is not None:
            self._camera.close()
            self._camera = None
        self.task = None
        self._obs = {}

    def close(self) -> None:
        self.disconnect()

    @property
    def is_connected(self) -> bool:
        return self.task is not None

    def _task(self) -> Task:
        if self.task is None:
            raise SimDriverError("the simulated robot is not connected; call connect() first")
        return self.task

    # ------------------------------------------------------------------ description
    @property
    def name(self) -> str:
        return f"sim:{self.task_config.get('name', '')}"

    @property
    def control_dt(self) -> float:
        return float(self._task().control_dt)

    @property
    def action_names(self) -> tuple[str, ...]:
        self._task()
        return self._action_names

    @property
    def obs_dims(self) -> dict[str, int]:
        self._task()
        return {g: int(v.shape[1]) for g, v in self._obs.items() if _is_vector(v)}

    @property
    def joint_limits(self) -> tuple[np.ndarray, np.ndarray]:
        self._task()
        return self._low.copy(), self._high.copy()

    @property
    def max_step(self) -> np.ndarray:
        low, high = self.joint_limits
        return ((high - low) * self.max_step_fraction).astype(np.float32)

    @property
    def cameras(self) -> dict[str, CameraSpec]:
        h, w = self._camera_size
        return {name: self._task_cameras.get(name, CameraSpec(h, w)) for name in self._camera_names}

    @property
    def instruction(self) -> str | None:
        """Env 0's instruction text for a task that draws one (tabletop tasks), else None."""
        texts = getattr(self._task(), "instruction_text", None)
        return None if texts is None else str(texts(np.array([0]))[0])

    # ------------------------------------------------------------------ control
    def reset(self) -> dict[str, np.ndarray]:
        self._obs = self._task().reset()
        self._outcome = StepOutcome()
        self._last_action = np.zeros(len(self._action_names), dtype=np.float32)
        return self.observe()

    def observe(self) -> dict[str, np.ndarray]:
        self._task()
        return {
            g: np.ascontiguousarray(v[0], dtype=np.float32)
            for g, v in self._obs.items()
            if _is_vector(v)
        }

    def act(self, action: np.ndarray) -> None:
        task = self._task()
        batch = np.asarray(action, dtype=np.float32).reshape(1, task.action_dim)
        result = task.step(batch)
        self._obs = result.obs
        self._last_action = batch[0].copy()
        self._outcome = StepOutcome(
            float(result.reward[0]), bool(result.terminated[0]), bool(result.truncated[0])
        )

    def outcome(self) -> StepOutcome:
        return self._outcome

    def hold_action(self) -> np.ndarray:
        task = self._task()
        hold = np.zeros(task.action_dim, dtype=np.float32)
        if self._position:
            spec = task.robot
            q = task.sim.qpos[0, self._qpos_adr[: self._n_joint]]
            default = np.asarray(spec.default_pose[: self._n_joint])
            hold[: self._n_joint] = (q - default) / float(spec.action_scale)
            if self._last_action is not None:  # non-joint entries (gripper) keep their command
                hold[self._n_joint :] = self._last_action[self._n_joint :]
        return np.clip(hold, self._low, self._high).astype(np.float32)

    def safe_stop(self) -> np.ndarray:
        """The hold target; a simulated robot moves only in `act`, so the next tick applies
        it (a real driver sends it at once)."""
        return self.hold_action()

    # ------------------------------------------------------------------ cameras
    def read_cameras(self) -> dict[str, np.ndarray]:
        """The newest rendered frame of each camera (empty until the first is ready), and
        a request to render the current state. Rendering runs in a child process
        (unilab.deploy.sim_camera) as a real camera captures on its own hardware, so the
        control loop never waits for it; frames are therefore up to one render late."""
        task = self._task()
        frames = {c: self._obs[IMAGE_GROUP_PREFIX + c][0].copy() for c in self._task_cameras}
        rendered = [c for c in self._camera_names if c not in self._task_cameras]
        if not rendered:
            return frames
        if self._camera is None:
            h, w = self._camera_size
            self._camera = CameraProcess(task.model, rendered, h, w)
            self._data = mujoco.MjData(task.model)
        assert self._data is not None
        task.sim.batch.get_data(0, self._data)
        self._camera.request(self._data)
        return {**self._camera.latest(), **frames}

    @property
    def camera_error(self) -> str:
        return self._camera.error if self._camera is not None else ""


def _is_vector(group: np.ndarray) -> bool:
    """A (n, d) float group: what crosses the wire as `obs/<group>`."""
    return group.ndim == 2 and np.issubdtype(group.dtype, np.floating)


def _has_camera(model: mujoco.MjModel, name: str) -> bool:
    return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name) >= 0
