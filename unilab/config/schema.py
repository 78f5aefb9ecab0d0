"""Typed configuration: one dataclass per section, composed by `unilab.config.compose`.

Tasks and algorithms subclass `TaskConfig` and `AlgoConfig` next to their code and register
the pair; the composer puts the chosen subclass into `Config.task` / `Config.algo`.
Every field carries a docstring: `unilab train --help` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from unilab.config.checks import checked
from unilab.config.randomization import DomainRandomization

DEFAULT_TASK = "cartpole_balance"


@dataclass
class RunConfig:
    seed: int = 0
    """Seed of the run; worker w uses seed + w, restarts add 1000 per restart."""
    total_env_steps: int = checked(2_000_000, ge=1)
    """Stop after this many environment steps (summed over all envs). Offline algorithms
    (bc_flow, bc_mse) step no envs: they stop after `algo.steps` gradient steps."""
    max_wall_s: float = checked(0.0, ge=0)
    """Stop after this many seconds of wall time; 0 means no limit."""
    out_dir: str = "runs"
    """Run directories go to <out_dir>/<task>/<algo>/<timestamp>/."""
    tag: str = ""
    """Optional suffix for the run directory name."""
    resume: str | None = None
    """A run directory to continue from its newest good checkpoint."""
    checkpoint_every: int = checked(50, ge=1)
    """Write a checkpoint every N learner iterations (offline algorithms: gradient steps),
    and always at the end."""
    export: bool = True
    """Export the policy (ONNX and TorchScript) at the end of training."""
    play_episodes: int = checked(1, ge=0)
    """Episodes played at the end of training into media/ (mp4 video and Rerun .rrd); 0: none."""
    quiet: bool = False
    """No progress bar; only a final summary (for CI and scripts)."""


@dataclass
class SimConfig:
    num_envs: int = checked(256, ge=1)
    """Environments in total, split evenly over runtime.num_workers."""
    max_abs_qpos: float = checked(1e4, gt=0)
    """|qpos| beyond this counts as diverged: the env is reset and its step marked sim_unstable."""
    max_abs_qvel: float = checked(1e4, gt=0)
    """|qvel| beyond this counts as diverged."""
    max_abs_qacc: float = checked(1e8, gt=0)
    """|qacc| beyond this counts as diverged."""


@dataclass
class RuntimeConfig:
    mode: str = checked("sync", choices=("sync", "async"))
    """sync: workers and learner take turns; async: workers run on while the learner learns."""
    num_workers: int = checked(1, ge=1)
    """Sim worker processes."""
    threads_per_worker: int = checked(1, ge=1)
    """MuJoCo batch threads inside each worker."""
    chunk_len: int = checked(32, ge=1)
    """Steps per env in one ring-buffer chunk (one slot)."""
    slots_per_worker: int = checked(2, ge=1)
    """Ring slots per worker; in async mode a worker waits only when all are full."""
    pin_cpus: bool = False
    """Pin each worker (and the learner) to its own core."""
    hang_timeout_s: float = checked(1.0, gt=0)
    """A worker whose heartbeat is older than this is treated as hung and replaced."""
    wait_timeout_s: float = checked(60.0, gt=0)
    """Longest the learner waits for a chunk while no local worker steps its envs, before it
    reports the runtime stalled (a worker still stepping toward a slow chunk is waited for)."""
    learner_threads: int = checked(0, ge=0)
    """torch intra-op threads of the learner process; 0: the cores the sim workers leave
    free (offline algorithms, which run no workers: every core)."""
    debug_poison: bool = False
    """Debug: workers refill a ring slot with poison (NaN) each time they take it, so a
    field a worker leaves unwritten shows up, and the learner's chunk check drops it."""
    max_ring_mb: float = checked(1024.0, gt=0)
    """Largest shared-memory ring (MiB) a run may create; camera images make rings big
    (printed at start: workers x slots x chunk_len x envs x bytes per step)."""
    allocation: str = checked("uniform", choices=("uniform", "thompson"))
    """How episodes are spread over a task's reset bins (`target_bins`, ...): uniform, or
    thompson (more where outcomes are still mixed; unilab.runtime.allocation)."""
    allocation_decay: float = checked(0.9, gt=0, le=1)
    """Decay of the bins' outcome evidence per iteration in which episodes ended (1: never
    forget)."""
    allocation_floor: float = checked(0.2, ge=0, le=1)
    """Share of episodes spread evenly over all bins whatever the posteriors say."""
    allocation_success_return: float | None = None
    """An episode's outcome is return >= this; None: the task's `success` metric."""
    branching_k: int = checked(1, ge=1)
    """Branching rollouts: envs per group continuing one leader's state (1: off); must
    divide the envs per worker (unilab.runtime.branching)."""
    branching_every: int = checked(50, ge=1)
    """Leader episode steps between two forks of its group."""
    backend: str = checked("local", choices=("local", "ray"))
    """local: workers are processes of this machine; ray: they run on Ray rollout hosts
    (the `ray` section; `pip install -e '.[ray]'`)."""


@dataclass
class LoggingConfig:
    tensorboard: bool = True
    """Write TensorBoard event files into the run directory."""
    jsonl: bool = True
    """Write one JSON line of metrics per iteration to metrics.jsonl."""
    log_every: int = checked(1, ge=1)
    """Log metrics every N iterations."""
    record_store: str | None = None
    """Record whole training episodes into this episode store (sync mode, or one worker)."""
    record_every: int = checked(1, ge=1)
    """Arm envs for a new recorded episode every N batches (1: record continuously)."""
    record_max_envs: int = checked(64, ge=1)
    """Env columns recorded, spread evenly over the workers."""


@dataclass
class VizConfig:
    rerun: bool = False
    """During training, record a short rollout of the current policy to media/train_<it>.rrd."""
    every: int = checked(50, ge=1)
    """Learner iterations between two training-time recordings."""
    steps: int = checked(200, ge=1)
    """Control steps per training-time recording."""
    num_envs: int = checked(2, ge=1)
    """Envs per training-time recording."""


@dataclass
class EvalConfig:
    every: int = 0
    """During training, evaluate the current policy every N learner iterations (offline
    algorithms: gradient steps); 0: never."""
    episodes: int = 16
    """Episodes per evaluation: one per env, deterministic actions (chunked policies: noise
    drawn from `seed`), the same start states."""
    seed: int = 12345
    """Seed of the evaluation task (apart from the training envs)."""


@dataclass
class RayConfig:
    address: str = ""
    """Ray cluster to join (ray.init(address=...)); empty: start a local one."""
    hosts: int = checked(2, ge=1)
    """Rollout host actors; runtime.num_workers workers are split evenly among them."""
    num_cpus_per_host: float = checked(1.0, gt=0)
    """CPUs each host claims from Ray (placement); its workers run inside that claim."""
    max_restarts: int = checked(-1, ge=-1)
    """Restarts Ray gives a lost host (-1: unlimited); each is counted."""
    pull_timeout_s: float = checked(0.05, gt=0)
    """Longest a host's pull waits for a chunk; new weights reach a host between pulls."""
    object_store_mb: int = checked(256, ge=64)
    """Object store size of a local Ray started here (not used with an address)."""


@dataclass
class DataConfig:
    store: str | None = None
    """Episode store an offline algorithm (bc_flow, bc_mse) trains from: a directory written
    by the scripted experts, `unilab play ... record=`, HIL sessions or `unilab data
    import-lerobot`. Frames need the fields the policy reads (obs/policy, images/<camera>,
    obs/instruction) and `action`."""
    prefetch: int = checked(2, ge=0)
    """Offline training: batches built ahead on a background thread (0: in the loop)."""
    image_cache_mib: int = checked(4096, ge=0)
    """Offline training: load the store's camera images into memory once when they fit in
    this many MiB (a batch is then a memory gather, not a zarr decompression: ~1.3k -> far
    more samples/s); larger stores, or 0, read images from the store per batch."""


@dataclass
class TaskConfig:
    name: str = DEFAULT_TASK
    """Registered task name (`unilab list tasks`)."""
    episode_length_s: float = checked(10.0, gt=0)
    """Episodes time out (truncated, not terminated) after this many seconds."""
    obs_noise: float = checked(0.0, ge=0)
    """Scale of uniform observation noise on the policy group (0: off)."""
    reward_weights: dict[str, float] = field(default_factory=dict)
    """Overrides of reward term weights, by term name; a weight of 0 disables the term."""
    randomization: DomainRandomization = field(default_factory=DomainRandomization)
    """Per-env physics ranges drawn at each reset (friction, mass, CoM, gains, damping)."""


@dataclass
class AlgoConfig:
    name: str = "ppo"
    """Registered algorithm name (`unilab list algorithms`)."""
    max_staleness: int = checked(4, ge=0)
    """Chunks made by a policy more than this many versions old are dropped (async mode)."""


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    task: Any = field(default_factory=TaskConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    algo: Any = field(default_factory=AlgoConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    viz: VizConfig = field(default_factory=VizConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    data: DataConfig = field(default_factory=DataConfig)
    device: str = "auto"
    """Learner device: auto (CUDA/ROCm, then MPS, then XPU, else CPU), cpu, cuda, cuda:N, mps, xpu."""
