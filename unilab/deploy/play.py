"""`unilab play`: run a policy in simulation; write a video, a Rerun recording and a summary.

A few envs (default: one per episode, at most 4) step together; env 0 is the one filmed
and recorded. Play stops once `episodes` episodes have ended over all envs. Outputs go to
`<out>/media/<name>.{mp4,rrd,json}`. When offscreen rendering is unavailable the video is
skipped with a note saying why, and the recording and summary are still written.

Camera views: a task that observes camera images (`images/<cam>` groups, the tabletop
family) has env 0's observation images, exactly as the policy saw them, beside the scene
in every mp4 frame (nearest-neighbour scaled) and as `cameras/<cam>` image entities in the
`.rrd`; the scene camera shows the episode's own colours and lights (the task's render-only
looks). Other tasks get small renders of their model cameras in the `.rrd`.

The policy is a run directory / ONNX file (`LoadedPolicy`) or the task's scripted expert
(`ExpertSource`), whose episodes are seeded `seed, seed + 1, ...` as `unilab collect`
seeds them: `--seed S` replays the collected episode with seed S.

Failure alerts (`alerts`, a VLA with value heads): the value heads' P(success) and
progress at each re-plan feed a `FailureAlerter` (`unilab.deploy.live_alerts`); each alert
goes to `on_alert` as it is raised (the CLI prints it) and into the summary's `alerts`,
and env 0's predictions and alerts are Rerun scalars in the recording
(`state/value_success/0`, `state/value_progress/0`, `state/alert/0`: 1 at an alert step).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np

from unilab.config.errors import ConfigError
from unilab.config.schema import SimConfig, TaskConfig
from unilab.deploy.failure_alerts import Alert
from unilab.deploy.live_alerts import AlertMonitor, AlertOptions
from unilab.deploy.policy_source import LoadedPolicy
from unilab.runtime.policy import Policy
from unilab.runtime.rollout import StepInfo, rollout
from unilab.tasks.base import IMAGE_PREFIX, Task
from unilab.utils.atomic import atomic_write_text
from unilab.viz.recorder import RolloutRecorder
from unilab.viz.video import (
    Mp4Writer,
    RenderUnavailableError,
    SceneCamera,
    beside,
    beside_width,
    jpeg,
)

if TYPE_CHECKING:
    from unilab.runtime.takeover import ExpertTakeover
    from unilab.tasks.experts.base import ScriptedExpert

MAX_CAMERAS = 4
CAMERA_IMAGE_SIZE = (160, 120)


@dataclass
class PlayResult:
    task: str
    policy: str
    source: str
    seed: int
    num_envs: int
    steps: int
    """Control steps taken (each steps every env)."""
    episodes: list[dict[str, Any]]
    """In the order they ended: env, return, length, reasons."""
    video: str | None = None
    video_frames: int = 0
    rrd: str | None = None
    recorded_episodes: list[int] = field(default_factory=list)
    """Store indices of the episodes written to `record`."""
    recorded_steps: int = 0
    """Frames of env 0 in the recording: steps + 1 (the start state)."""
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    """Failure alerts raised (with `alerts`): env, episode, step, time_s, kind, value."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ExpertSource:
    """Play the task's scripted expert instead of a trained policy."""

    kind: str = "expert"
    source: str = "scripted expert"


def _seed_counter(first: int) -> Iterator[int]:
    seed = first
    while True:
        yield seed
        seed += 1


def _expert(task: Task, seed: int) -> ScriptedExpert:
    """The task's scripted expert; a ValueError for a task without one."""
    from unilab.tasks.experts import EXPERTS, make_expert
    from unilab.tasks.tabletop import TabletopTask

    if task.cfg.name not in EXPERTS or not isinstance(task, TabletopTask):
        raise ValueError(
            f"task {task.cfg.name!r} has no scripted expert; tasks with one: "
            f"{', '.join(EXPERTS.names())}"
        )
    return make_expert(task, seed=seed)


def _actor(policy: LoadedPolicy | ExpertSource, task: Task, seed: int) -> Policy[np.ndarray]:
    """The policy to roll out in `task`; a ValueError when it does not fit the task."""
    if isinstance(policy, ExpertSource):
        from unilab.runtime.expert_policy import ExpertPolicy

        expert = _expert(task, seed)
        seeds = _seed_counter(seed)
        task.episode_seeder = lambda ids: np.array([next(seeds) for _ in ids], np.int64)
        return ExpertPolicy(expert)
    from unilab.deploy.policy_source import check_fits

    check_fits(policy, task)
    return policy.policy


def _takeover(
    policy: LoadedPolicy | ExpertSource,
    task: Task,
    seed: int,
    after_s: float | None,
    on_error: bool = False,
) -> ExpertTakeover | None:
    """The expert takeover of `play(takeover_after_s=..., takeover_on_error=...)`; a
    ValueError when it cannot be."""
    if after_s is None and not on_error:
        return None
    if isinstance(policy, ExpertSource):
        raise ValueError("a takeover hands the expert's own episodes to itself; play a policy")
    if after_s is not None and not (math.isfinite(after_s) and after_s >= 0):
        raise ValueError(f"takeover_after_s={after_s} must be seconds >= 0")
    from unilab.runtime.takeover import ExpertTakeover

    steps = None if after_s is None else round(after_s / task.control_dt)
    try:
        return ExpertTakeover(_expert(task, seed), steps, off_track=on_error)
    except ValueError as exc:  # e.g. an expert that cannot tell mistakes: bad flags
        raise ConfigError(str(exc)) from None


def play(
    policy: LoadedPolicy | ExpertSource,
    task_cfg: TaskConfig,
    sim_cfg: SimConfig,
    media_dir: Path,
    name: str,
    *,
    episodes: int = 1,
    num_envs: int | None = None,
    seed: int = 0,
    video: bool = True,
    rerun: bool = True,
    spawn: bool = False,
    width: int = 640,
    height: int = 480,
    max_steps: int | None = None,
    record: str | Path | None = None,
    n_act: int | None = None,
    ensemble_decay: float | None = None,
    noise_seed: int | None = None,
    alerts: AlertOptions | None = None,
    on_alert: Callable[[Alert], None] | None = None,
    takeover_after_s: float | None = None,
    takeover_on_error: bool = False,
    one_per_env: bool = False,
) -> PlayResult:
    """`record`: an episode store path; the finished episodes are appended to it.
    `one_per_env`: each env plays (and `record` keeps) only its first episode, so
    `episodes` needs exactly as many envs (the default then): what a success rate over the
    episodes needs, since otherwise the quick episodes of early finishers are counted
    and the long ones still running at the end are not.
    Chunked policies (the VLA) execute `n_act` actions per chunk with optional temporal
    ensembling (default: the policy's own settings), the flow's noise drawn from
    `noise_seed` (default: `seed`). `alerts`: live failure alerts from the policy's value
    heads, each passed to `on_alert` when raised (`NoValueHeadsError` without them).
    `takeover_after_s`: the task's scripted expert drives every episode still running after
    that many seconds (`unilab.runtime.takeover`), and with `takeover_on_error` every
    episode from the step the expert sees the policy make a mistake (a missed grasp);
    recorded frames are then marked `is_intervention`, and such episodes are stored as
    policy failures."""
    from unilab.tasks.registry import make_task

    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be at least 1")
    envs = num_envs or (episodes if one_per_env else min(episodes, 4))
    if envs < 1:
        raise ValueError(f"num_envs={envs} must be at least 1")
    if one_per_env and envs != episodes:  # more envs would count the quickest first episodes
        raise ValueError(
            f"one episode per env: {episodes} episodes need {episodes} envs, not {envs}"
        )
    t_start = time.perf_counter()
    task = make_task(task_cfg, num_envs=envs, seed=seed, sim_cfg=sim_cfg)
    actor = _actor(policy, task, seed)
    try:
        takeover = _takeover(policy, task, seed, takeover_after_s, takeover_on_error)
    except ValueError:
        task.close()
        raise
    monitor = None
    if alerts is not None:
        try:
            monitor = AlertMonitor(actor, envs, task.control_dt, alerts, on_alert)
        except ValueError:
            task.close()
            raise
    value_attrs = ["value_success", "value_progress", "alert"] if monitor is not None else []
    spec = task.observation_spec()
    views = [g for g in spec if g.startswith(IMAGE_PREFIX)]
    media_dir.mkdir(parents=True, exist_ok=True)
    result = PlayResult(task_cfg.name, policy.kind, policy.source, seed, envs, 0, [])
    recorder = (
        RolloutRecorder(
            task.model,
            _action_names(task),
            list(task.reward_weights),
            [*task.state_attrs, *value_attrs],
        )
        if rerun
        else None
    )
    film = _Film(task, media_dir / f"{name}.mp4", width, height, video, result.notes, views)
    limit = max_steps or task.max_episode_steps * math.ceil(episodes / envs) + 1

    store = None
    if record is not None:
        from unilab.data.play_recorder import PlayRecorder

        store = PlayRecorder(
            record,
            {g: (s.shape, s.dtype) for g, s in spec.items()},
            task.action_dim,
            envs,
            fps=1.0 / task.control_dt,
            meta={"task": task_cfg.name, "robot": task.robot.name, "seed": seed},
            # one first episode per slot: equal (seed, env count, slot) is the same start
            scene=f"seed={seed},envs={envs}" if one_per_env else None,
        )
    obs = task.reset()
    film.capture(obs)
    if recorder is not None:
        _record(recorder, task, 0, None, None, 0, film.camera_images(obs))
    env0_episode = [0]
    first_running = np.ones(envs, dtype=bool)
    """Envs still in their first episode (`one_per_env` records only those)."""

    def on_step(info: StepInfo) -> None:
        out = info.result
        extra: dict[str, float] = {}
        if monitor is not None:
            before = len(monitor.alerts)
            monitor(info)
            raised = any(a.env == 0 for a in monitor.alerts[before:])
            extra = {
                "value_success": float(monitor.success[0]),
                "value_progress": float(monitor.progress[0]),
                "alert": float(raised),
            }
        if store is not None:
            store.add(
                info.obs,
                # What the step executed, clipped (`task.actions` is already zeroed for
                # the envs whose episode ended at this step).
                task.executed_actions.copy(),
                out.reward,
                out.terminated,
                out.truncated,
                success=out.extras.get("success"),  # the episode outcome, as metadata
                intervention=info.intervention,
                keep=first_running if one_per_env else None,
            )
        first_running[out.terminated | out.truncated] = False
        film.capture(out.obs)
        if recorder is not None:
            terms = {k: float(v[0]) for k, v in out.reward_terms.items()}
            images = film.camera_images(out.obs)
            _record(
                recorder, task, info.step, info.actions[0], terms, env0_episode[0], images, extra
            )
        if out.terminated[0] or out.truncated[0]:
            env0_episode[0] += 1

    try:
        ran = rollout(
            task,
            actor,
            steps=limit,
            episodes=episodes,
            on_step=on_step,
            obs=obs,
            n_act=n_act,
            ensemble_decay=ensemble_decay,
            noise_seed=seed if noise_seed is None else noise_seed,
            takeover=takeover,
            one_per_env=one_per_env,
        )
    finally:
        task.close()
    result.episodes = [e.to_dict() for e in ran.episodes]
    if monitor is not None:
        result.alerts = [asdict(a) for a in monitor.alerts]
    step = ran.steps
    result.steps = step
    if store is not None:
        result.recorded_episodes = store.close()
    result.video, result.video_frames = film.close()
    if recorder is not None:
        result.recorded_steps = recorder.num_steps
        if spawn:
            recorder.spawn(name)
        else:
            result.rrd = str(recorder.save(media_dir / f"{name}.rrd", name))
    result.wall_s = time.perf_counter() - t_start
    atomic_write_text(media_dir / f"{name}.json", json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def _action_names(task: Task) -> list[str]:
    names = list(task.robot.joint_names)
    return names if len(names) == task.action_dim else [f"a{i}" for i in range(task.action_dim)]


def _record(
    recorder: RolloutRecorder,
    task: Task,
    step: int,
    action: np.ndarray | None,
    terms: dict[str, float] | None,
    episode: int,
    images: dict[str, bytes | np.ndarray],
    extra: dict[str, float] | None = None,
) -> None:
    sim = task.sim
    state = {name: np.asarray(getattr(task, name))[0] for name in task.state_attrs}
    state.update({k: np.asarray(v) for k, v in (extra or {}).items()})
    recorder.add(
        step,
        step * task.control_dt,
        sim.xpos[0],
        sim.xquat[0],
        sim.qpos[0],
        action,
        terms,
        state,
        episode,
        images,
    )


class _Film:
    """Video of env 0 from the scene camera, with the task's observed camera views beside
    it; camera frames for the Rerun recording."""

    def __init__(
        self,
        task: Task,
        path: Path,
        width: int,
        height: int,
        enabled: bool,
        notes: list[str],
        views: list[str],
    ) -> None:
        self.task = task
        self.path = path
        self.views = views
        """Observation groups of camera images shown beside the scene (images/<cam>)."""
        self.camera: SceneCamera | None = None
        self.writer: Mp4Writer | None = None
        self.model_cameras: dict[str, SceneCamera] = {}
        self._fresh = False
        if not enabled:
            return
        # A private model: the episode's render-only looks are written into it per frame.
        self.model = copy.deepcopy(task.model)
        base = task.robot.base_body
        track = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, base) if base else None
        try:
            self.camera = SceneCamera(self.model, width, height, track_body=track)
        except RenderUnavailableError as exc:
            notes.append(f"no video: {exc}")
            return
        self.data = mujoco.MjData(self.model)
        w, h = self.camera.width, self.camera.height
        self.writer = Mp4Writer(path, 1.0 / task.control_dt, beside_width(w, h, len(views)), h)
        if views:
            return  # the policy's own images stand for the model cameras
        for cam in range(min(self.model.ncam, MAX_CAMERAS)):
            cam_name = (
                mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_CAMERA, cam) or f"camera_{cam}"
            )
            cw, ch = CAMERA_IMAGE_SIZE
            self.model_cameras[cam_name] = SceneCamera(self.model, cw, ch, camera=cam_name)

    def capture(self, obs: dict[str, np.ndarray]) -> None:
        if self.camera is None or self.writer is None:
            return
        renderer = self.task.renderer
        if renderer is not None:
            renderer.apply_visuals(self.model, 0)
        # A persistent batch keeps each env's whole MjData: positions are those of its last call.
        self.task.sim.batch.get_data(0, self.data)
        scene = self.camera.render(self.data)
        panels = {g.removeprefix(IMAGE_PREFIX): obs[g][0] for g in self.views}
        self.writer.add(beside(scene, panels))
        self._fresh = True

    def camera_images(self, obs: dict[str, np.ndarray]) -> dict[str, bytes | np.ndarray]:
        """Env 0's observed camera images (exact), else renders of the model cameras."""
        if self.views:
            return {g.removeprefix(IMAGE_PREFIX): obs[g][0] for g in self.views}
        if not self._fresh or not self.model_cameras:
            return {}
        return {name: jpeg(cam.render(self.data)) for name, cam in self.model_cameras.items()}

    def close(self) -> tuple[str | None, int]:
        for cam in [self.camera, *self.model_cameras.values()]:
            if cam is not None:
                cam.close()
        if self.writer is None:
            return None, 0
        frames = self.writer.frames
        return str(self.writer.close()), frames


def play_run(
    run_dir: Path,
    *,
    episodes: int = 1,
    seed: int = 0,
    video: bool = True,
    max_steps: int | None = None,
    width: int = 640,
    height: int = 480,
    name: str | None = None,
) -> PlayResult:
    """Play a run's newest good checkpoint on its own task; outputs in `<run>/media/`
    named `final_<checkpoint>` unless `name` is given (the end-of-training media)."""
    from unilab.deploy.policy_source import load_policy
    from unilab.deploy.sim_task import configs_for_policy

    run_dir = Path(run_dir)
    policy = load_policy(run_dir)
    meta = policy.metadata
    task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, [])
    return play(
        policy,
        task_cfg,
        sim_cfg,
        run_dir / "media",
        name or f"final_{Path(policy.source).stem}",
        episodes=episodes,
        num_envs=1,
        seed=seed,
        video=video,
        max_steps=max_steps,
        width=width,
        height=height,
    )
