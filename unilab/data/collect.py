"""`unilab collect`: scripted-expert demonstrations of a tabletop task into an episode store.

    result = collect("demos.zarr", "arm_pick_place", episodes=200)

Worker processes (the runtime's `Supervisor`, `collect_worker_main`) step the task with its
scripted expert and write chunks, camera images included (uint8), into a shared-memory ring;
this process reassembles each env's episodes from the chunks and appends them to the store,
whole episodes under atomic commits. Only successful episodes are kept unless
`keep_failed`; each episode's metadata records its task, seed, instruction, success and the
expert's mode (`tags`), and every frame its `mode` in a column policies never read.

`episodes` is the number of this task's episodes the store should hold: a store that
already has some (an interrupted run, or the same command again) gets only the rest, with
seeds continuing past the largest stored one, so no seed is stored twice. Several tasks
can share one store (their schemas agree: proprioception, instruction ids, cameras,
actions). Every episode replays from its seed (`unilab.data.collect_worker`).

The ring's size is printed at start and limited by `max_ring_mb` (the run's
`runtime.max_ring_mb` in the CLI). The result records the collection's throughput per CPU
second over the steady part of the run (all processes, once every worker has delivered a
chunk) and samples of the processes' resident memory, for the benchmarks.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from unilab.config.schema import SimConfig, TaskConfig
from unilab.data.collect_worker import EPISODE_FIELDS, WORKER_TARGET
from unilab.data.episode import EpisodeMeta
from unilab.data.schema import FieldSpec, StoreSchema
from unilab.data.store import EpisodeStore
from unilab.data.throughput_meter import ThroughputMeter
from unilab.data.writer import EpisodeWriter
from unilab.runtime.fields import FieldSpecs, observation_fields, ring_field
from unilab.runtime.ring import RingBuffer
from unilab.runtime.ring_layout import SlotHeader
from unilab.runtime.ring_size import RingSize, check_ring_size, ring_size
from unilab.runtime.shm import SegmentOwner
from unilab.runtime.signals import StopSignal, install_signal_handlers
from unilab.runtime.supervisor import Supervisor
from unilab.tasks.base import IMAGE_PREFIX, INSTRUCTION
from unilab.utils.progress import CollectProgress

EXPERT_KINDS = ("scripted",)
MODE_FIELD = "mode"
PERTURBED_FIELD = "perturbed"
"""Per-frame bool column of stores collected with `action_noise`: the executed action
differed from the recorded (clean) one, so later actions of a chunk starting before it are
not the expert's answer to an unperturbed state (`FrameDataset` masks them)."""
"""Per-frame column of the expert's mode (int32): ground truth for mode discovery; no
learner reads it as an input."""
STORED_GROUPS = ("policy", "critic", INSTRUCTION)
"""Observation groups stored (as `obs/<group>`) besides the cameras (`images/<cam>`).
`critic` (proprioception + the privileged object state) is never a policy input; learners
use it as a training-time target (`algo.state_weight`) or a critic's input."""
IMAGE_CHUNK_BYTES = 1024 * 1024
"""Camera chunks of ~1 MiB (85 frames at 64 px): appends and whole-episode reads cost
per chunk, so 4x the store's default (256 KiB) halves the append cost and cuts sequential
reads by a third; random batch reads stay even (docs/decisions/0034-image-store-chunks.md)."""


@dataclass
class CollectResult:
    store: str
    task: str
    target: int
    """Episodes of this task the store should hold."""
    existing: int
    """Episodes of this task the store held at the start."""
    kept: int = 0
    """Episodes appended by this run."""
    attempted: int = 0
    """Whole episodes that ended in the workers (kept or dropped)."""
    succeeded: int = 0
    frames: int = 0
    """Frames appended by this run."""
    env_steps: int = 0
    """Env steps received from the workers (every frame, kept or not)."""
    seconds: float = 0.0
    seed_start: int = 0
    workers: int = 0
    envs_per_worker: int = 0
    cameras: list[str] = field(default_factory=list)
    ring: str = ""
    ring_bytes: int = 0
    interrupted: bool = False
    gave_up: bool = False
    """Stopped at max_attempts finished episodes before reaching the target."""
    episode_ids: list[int] = field(default_factory=list)
    steady: dict[str, float] = field(default_factory=dict)
    """Steady-state throughput: env_steps, images, cpu_s (all processes; main_cpu_s of it
    this process's: reassembly and store writes), wall_s, and env_steps/images per CPU
    second and per wall second; `whole_run` 1 when the run was too short for a steady
    window (it ended before every worker delivered) and the figures cover all of it."""
    rss: list[dict[str, float]] = field(default_factory=list)
    """Resident memory samples: env_steps so far, main_mib, workers_mib."""
    notes: list[str] = field(default_factory=list)

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.attempted if self.attempted else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Plan:
    """What the probe task says about the collection."""

    task_cfg: TaskConfig
    sim_cfg: SimConfig
    fields: FieldSpecs
    """Ring fields per step per env."""
    schema: StoreSchema
    store_of: dict[str, str]
    """Store field -> ring field of the per-frame user columns."""
    texts: list[str]
    mode_names: tuple[str, ...]
    robot: str
    fps: float
    cameras: list[str]


def store_schema(
    spec: dict[str, Any], action_dim: int, perturbed: bool = False
) -> tuple[StoreSchema, dict[str, str]]:
    """The store schema of a collection from a task's observation spec, and the ring field
    each store field comes from (`perturbed`: with the column of perturbed steps)."""
    user: dict[str, FieldSpec] = {}
    source: dict[str, str] = {}
    for group in (*STORED_GROUPS, *(g for g in spec if g.startswith(IMAGE_PREFIX))):
        name = group if group.startswith(IMAGE_PREFIX) else f"obs/{group}"
        shape, dtype = tuple(spec[group].shape), str(spec[group].dtype)
        chunk = None
        if name.startswith(IMAGE_PREFIX):
            chunk = max(1, IMAGE_CHUNK_BYTES // int(np.prod(shape)))
        user[name] = FieldSpec(shape, dtype, chunk)
        source[name] = ring_field(group)
    user["action"] = FieldSpec((action_dim,), "float32")
    user[MODE_FIELD] = FieldSpec((), "int32")
    source["action"], source[MODE_FIELD] = "action", "mode"
    if perturbed:
        user[PERTURBED_FIELD] = FieldSpec((), "bool")
        source[PERTURBED_FIELD] = PERTURBED_FIELD
    return StoreSchema(user), source


def _plan(
    task: TaskConfig | str, sim: SimConfig | None, seed: int, perturbed: bool = False
) -> _Plan:
    from unilab.config.compose import compose
    from unilab.config.errors import ConfigError
    from unilab.tasks.experts import EXPERTS
    from unilab.tasks.registry import check_task_builds
    from unilab.tasks.tabletop import TabletopTask

    task_cfg = compose([f"task={task}"]).task if isinstance(task, str) else task
    sim_cfg = sim or SimConfig()
    if task_cfg.name not in EXPERTS:
        raise ConfigError(
            f"task {task_cfg.name!r} has no scripted expert; tasks with one: "
            f"{', '.join(EXPERTS.names())}"
        )
    probe = check_task_builds(task_cfg, sim_cfg, seed=seed)
    try:
        assert isinstance(probe, TabletopTask)
        spec = probe.observation_spec()
        groups = [*STORED_GROUPS, *(g for g in spec if g.startswith(IMAGE_PREFIX))]
        fields = observation_fields(spec, groups)
        fields.update(EPISODE_FIELDS)
        fields["action"] = ((probe.action_dim,), "float32")
        if perturbed:
            fields[PERTURBED_FIELD] = ((), "bool")
        schema, store_of = store_schema(dict(spec), probe.action_dim, perturbed)
        return _Plan(
            task_cfg,
            sim_cfg,
            fields,
            schema,
            store_of,
            list(probe.instructions.texts),
            tuple(EXPERTS.get(task_cfg.name).mode_names),
            probe.robot.name,
            1.0 / probe.control_dt,
            list(getattr(task_cfg, "cameras", [])),
        )
    finally:
        probe.close()


def _seed_start(metas: Sequence[EpisodeMeta], task: str, seed: int) -> int:
    seeds = [m.seed for m in metas if m.task == task and m.seed is not None]
    return max([seed, *(s + 1 for s in seeds)])


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def collect(
    store: str | os.PathLike[str],
    task: TaskConfig | str,
    episodes: int,
    *,
    sim: SimConfig | None = None,
    expert: str = "scripted",
    workers: int | None = None,
    envs_per_worker: int = 16,
    chunk_len: int = 16,
    slots_per_worker: int = 2,
    seed: int = 0,
    keep_failed: bool = False,
    action_noise: float = 0.0,
    max_ring_mb: float = 1024.0,
    commit_frames: int = 2048,
    hang_timeout_s: float = 10.0,
    quiet: bool = False,
    notify: Callable[[str], None] | None = None,
    rss_every_s: float = 1.0,
    max_attempts: int | None = None,
    mode_shares: Mapping[str, float] | None = None,
) -> CollectResult:
    """Collect until the store holds `episodes` episodes of `task` (a name or a task
    config); see the module doc. `workers` defaults to the usable cores. `notify` gets the
    start-up lines (ring size, what is left to collect); default: the progress console.
    `max_attempts`: stop (with a note, `result.gave_up`) after this many finished episodes
    of this run, kept or not (default: 10 per episode to collect, at least 100), so a task
    the expert rarely solves does not run forever. `action_noise` > 0: the expert executes
    its actions plus Gaussian noise of that std and the store records the clean actions
    (DART; `ScriptedExpert.perturb`), so the demonstrations show recoveries. `mode_shares`
    ({mode name: share}, e.g. {"push": 0.7, "carry": 0.3}): how often the expert draws
    each strategy (default: uniform), to make demonstrations where one way dominates."""
    from unilab.config.errors import ConfigError

    if expert not in EXPERT_KINDS:
        raise ConfigError(f"expert={expert!r} is not one of {', '.join(EXPERT_KINDS)}")
    for name, value, low in (
        ("episodes", episodes, 1),
        ("workers", workers if workers is not None else 1, 1),
        ("envs_per_worker", envs_per_worker, 1),
        ("chunk_len", chunk_len, 1),
        ("slots_per_worker", slots_per_worker, 1),
        ("commit_frames", commit_frames, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name}={value!r} must be an integer >= {low}")
    if seed < 0:
        raise ConfigError(f"seed={seed} must be >= 0")
    if not (np.isfinite(action_noise) and 0.0 <= action_noise <= 1.0):
        raise ConfigError(
            f"action_noise={action_noise} must be a std in [0, 1] (action units; 0: off)"
        )
    num_workers = workers or usable_cores()
    plan = _plan(task, sim, seed, perturbed=action_noise > 0)
    mode_probs = None
    if mode_shares is not None:
        from unilab.tasks.experts import mode_probs_from_shares

        try:
            mode_probs = mode_probs_from_shares(plan.mode_names, mode_shares)
        except ValueError as exc:
            raise ConfigError(f"{plan.task_cfg.name}: {exc}") from None
    size = ring_size(plan.fields, num_workers, envs_per_worker, chunk_len, slots_per_worker)
    check_ring_size(
        size, max_ring_mb, "max_ring_mb", "workers, envs_per_worker, chunk_len or the image size"
    )

    t0 = time.perf_counter()
    with EpisodeStore.open(store, "a", schema=plan.schema) as st:
        metas = st.all_meta()
        existing = sum(1 for m in metas if m.task == plan.task_cfg.name)
        result = CollectResult(
            store=str(store),
            task=plan.task_cfg.name,
            target=episodes,
            existing=existing,
            seed_start=_seed_start(metas, plan.task_cfg.name, seed),
            workers=num_workers,
            envs_per_worker=envs_per_worker,
            cameras=plan.cameras,
            ring=size.describe(),
            ring_bytes=size.total_bytes,
        )
        with CollectProgress(episodes, plan.task_cfg.name, quiet) as bar:
            say = notify or bar.print
            say(f"{size.describe()} (limit {max_ring_mb:g} MiB)")
            if existing >= episodes:
                result.notes.append(
                    f"{store} already holds {existing} episodes of {plan.task_cfg.name}; "
                    "nothing to collect"
                )
                say(result.notes[-1])
                return result
            if existing:
                result.notes.append(
                    f"{store} holds {existing} episodes of {plan.task_cfg.name}: collecting "
                    f"{episodes - existing} more, seeds from {result.seed_start}"
                )
                say(result.notes[-1])
            remaining = episodes - existing
            attempts = max_attempts if max_attempts is not None else max(100, 10 * remaining)
            run = _Collection(
                st, plan, result, size, keep_failed, commit_frames, bar, attempts, action_noise,
                mode_probs,
            )  # fmt: skip
            run.run(
                num_workers,
                envs_per_worker,
                chunk_len,
                slots_per_worker,
                seed,
                hang_timeout_s,
                rss_every_s,
            )
    result.seconds = time.perf_counter() - t0
    return result


class _Collection:
    """The main process's loop: chunks from the ring -> per-worker episode writers."""

    def __init__(
        self,
        store: EpisodeStore,
        plan: _Plan,
        result: CollectResult,
        size: RingSize,
        keep_failed: bool,
        commit_frames: int,
        bar: CollectProgress,
        max_attempts: int,
        action_noise: float = 0.0,
        mode_probs: list[float] | None = None,
    ) -> None:
        self.store = store
        self.action_noise = action_noise
        self.mode_probs = mode_probs
        """The expert's per-mode draw probabilities (None: uniform)."""
        self.max_attempts = max_attempts
        self.plan = plan
        self.result = result
        self.size = size
        self.keep_failed = keep_failed
        self.commit_frames = commit_frames
        self.bar = bar
        self.remaining = result.target - result.existing
        self.accepted = 0
        self.writers: list[EpisodeWriter] = []
        self.tracking: list[np.ndarray] = []
        """Per worker, (envs,) bool: the env's buffered frames start at an episode start."""
        self.expected: list[tuple[int, int]] = []
        """Per worker, the (generation, seq) of the next chunk that continues its stream."""

    def run(
        self,
        num_workers: int,
        envs: int,
        chunk_len: int,
        slots: int,
        seed: int,
        hang_timeout_s: float,
        rss_every_s: float,
    ) -> None:
        from omegaconf import OmegaConf

        plan, result = self.plan, self.result
        meta = {"task": plan.task_cfg.name, "robot": plan.robot, "fps": plan.fps}
        self.writers = [
            EpisodeWriter(
                self.store,
                envs,
                origin="sim",
                default_meta=meta,
                initial_capacity=256,
                commit_frames=self.commit_frames,
            )
            for _ in range(num_workers)
        ]
        self.tracking = [np.ones(envs, dtype=bool) for _ in range(num_workers)]
        self.expected = [(0, 0)] * num_workers
        spec = {name: (shape, np.dtype(dtype)) for name, (shape, dtype) in plan.fields.items()}
        owner = SegmentOwner()
        ring = RingBuffer(spec, num_workers, envs, chunk_len, slots, owner=owner)
        config = {
            "task": OmegaConf.to_container(OmegaConf.structured(plan.task_cfg)),
            "sim": OmegaConf.to_container(OmegaConf.structured(plan.sim_cfg)),
            "seed_start": result.seed_start,
            "num_workers": num_workers,
            "action_noise": self.action_noise,
            "mode_probs": self.mode_probs,
        }
        stop = StopSignal()
        restore = (
            install_signal_handlers(stop.set)
            if threading.current_thread() is threading.main_thread()
            else None
        )
        meter = ThroughputMeter(len(plan.cameras), rss_every_s)
        sup = Supervisor(
            WORKER_TARGET,
            num_workers,
            owner=owner,
            ring=ring,
            config=config,
            seed=seed,
            hang_timeout_s=hang_timeout_s,
        )
        try:
            sup.start()
            delivered = [0] * num_workers
            while self.accepted < self.remaining and not stop and not self._gave_up():
                sup.poll()
                for slot in ring.get_ready(timeout=0.05):
                    header = ring.header(slot)
                    if not meter.started and all(delivered):
                        meter.start(sup.pids(), result.env_steps)
                    if not meter.opened:
                        meter.open(sup.pids(), result.env_steps)
                    if self.accepted < self.remaining:
                        self._feed(header, ring.views(slot))
                    delivered[header.worker_id] += 1
                    ring.release(slot)
                meter.sample(sup.pids(), result.env_steps, result.frames)
                self.bar.update(result.existing + self.accepted, result.success_rate, meter.rate())
            meter.stop(sup.pids(), result.env_steps)
            for writer in self.writers:
                result.episode_ids += writer.close()
        finally:
            sup.shutdown()
            if restore is not None:
                restore()
        result.kept = len(result.episode_ids)
        result.frames = sum(w.frames_written for w in self.writers)
        result.interrupted = bool(stop)
        result.steady = meter.steady()
        result.rss = meter.rss

    def _gave_up(self) -> bool:
        result = self.result
        if result.attempted < self.max_attempts or result.gave_up:
            return result.gave_up
        result.gave_up = True
        rate = result.success_rate or 0.0
        result.notes.append(
            f"stopped after {result.attempted} finished episodes (max_attempts): the expert "
            f"succeeded in {100 * rate:.0f} % of them, too few to reach {result.target} "
            "episodes; check the task settings, or pass keep_failed=true"
        )
        self.bar.print(result.notes[-1])
        return True

    def _feed(self, header: SlotHeader, views: dict[str, np.ndarray]) -> None:
        w = header.worker_id
        writer, tracking = self.writers[w], self.tracking[w]
        if (header.generation, header.seq) != self.expected[w]:
            # A replacement process (or a gap): episodes in progress are not whole.
            writer.discard(range(writer.n_envs))
            tracking[:] = header.seq == 0  # a new process starts every env afresh
        self.expected[w] = (header.generation, header.seq + 1)
        plan, result = self.plan, self.result
        steps = views["action"].shape[0]
        for t in range(steps):
            frames: dict[str, Any] = {name: views[src][t] for name, src in plan.store_of.items()}
            terminated, truncated = views["terminated"][t], views["truncated"][t]
            frames.update(reward=views["reward"][t], terminated=terminated, truncated=truncated)
            ended = np.flatnonzero(terminated | truncated)
            keep = None
            if ended.size:
                keep = np.zeros(writer.n_envs, dtype=bool)
                for env in ended.tolist():
                    if not tracking[env]:
                        continue
                    success = bool(views["success"][t, env])
                    result.attempted += 1
                    result.succeeded += int(success)
                    if (success or self.keep_failed) and self.accepted < self.remaining:
                        keep[env] = True
                        self.accepted += 1
                        writer.set_meta(env, self._meta(views, t, env, success, w))
                tracking[ended] = True
            result.episode_ids += writer.add_step(frames, keep)
        result.env_steps += steps * writer.n_envs

    def _meta(
        self, views: dict[str, np.ndarray], t: int, env: int, success: bool, worker: int
    ) -> EpisodeMeta:
        plan = self.plan
        mode = int(views["mode"][t, env])
        index = int(views["instruction_index"][t, env])
        return EpisodeMeta(
            task=plan.task_cfg.name,
            language_instruction=plan.texts[index],
            success=success,
            seed=int(views["seed"][t, env]),
            robot=plan.robot,
            fps=plan.fps,
            tags={
                "expert": "scripted",
                "mode": mode,
                "mode_name": plan.mode_names[mode],
                "instruction_index": index,
                "worker": worker,
                "action_noise": self.action_noise,
                **({} if self.mode_probs is None else {"mode_probs": self.mode_probs}),
            },
        )
