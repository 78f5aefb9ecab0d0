"""The task API: observations, rewards, terminations and resets, batched over a sim's envs.

A task owns one `BatchedSim` and computes everything in numpy over all of its envs at once.
Subclasses provide:

- `build_model()` (default: the robot spec's scene) and `action_to_ctrl(actions)`;
- `observe() -> {group: (n, ...) array}` with at least a `policy` group: float32 vectors
  (`policy`, `critic`) and, for vision-language tasks, uint8 images (`images/<camera>`,
  (n, H, W, 3)) and int64 token ids (`instruction`, (n, L)); `observation_spec()` declares
  each group's shape and dtype (by default it is read off one `observe()` call);
- reward terms as methods `reward_<name>(self) -> (n,)`, weighted by `default_reward_weights`
  overridden by `cfg.reward_weights` (each term is reported, for logging);
- `terminations() -> {reason: (n,) bool}`;
- `reset_envs(ids)`: sample new states (and commands) for those envs.

`step()` auto-resets ended envs. It returns the first observation of the new episode for
those envs in `obs` and the last observation of the old one in `final_obs`, so learners
can bootstrap time-outs (`truncated`) apart from real ends (`terminated`).

Per-episode seeds (for collecting demonstrations one can replay): with `episode_seeder`
set, every episode start (reset, restart, auto-reset) asks it for one seed per env and
draws that env's new episode from its own generator `episode_rng(seed, TASK_STREAM)`
instead of the task's shared stream; `episode_seed` holds each env's current seed (-1:
drawn from the shared stream). An episode then depends only on its seed and the actions
taken, not on which env slot or worker ran it. (Domain randomization, off by default,
draws from the sim's own stream either way.)
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import mujoco
import numpy as np

from unilab.config.schema import SimConfig, TaskConfig
from unilab.robots.spec import RobotSpec
from unilab.robots.validate import load_model
from unilab.sim.batched_sim import BatchedSim
from unilab.sim.indices import env_index
from unilab.sim.render import BatchRenderer
from unilab.sim.stability import StabilityLimits
from unilab.tasks.env_state import EnvState

SIM_UNSTABLE = "sim_unstable"
TIME_OUT = "time_out"
IMAGE_PREFIX = "images/"
"""Observation groups named images/<camera> hold (n, H, W, 3) uint8 RGB frames."""
DEPTH_PREFIX = "depth/"
"""Observation groups named depth/<camera> hold (n, H, W) float32 metres."""
INSTRUCTION = "instruction"
"""The observation group of language token ids, (n, L) int64, padded with 0."""
OBS_DTYPES = ("float32", "uint8", "int64")
TASK_STREAM = 0
"""`episode_rng` stream of a seeded episode's start state (objects, colours, instruction)."""
EXPERT_STREAM = 1
"""`episode_rng` stream of a scripted expert's per-episode draws (mode, speed, waypoints)."""
PERTURB_STREAM = 2
"""`episode_rng` stream of the perturbations a collecting expert adds to executed actions."""

EpisodeSeeder = Callable[[np.ndarray], np.ndarray]
"""Env ids whose episodes start now -> one int seed per id (see Task.episode_seeder)."""


def draw_bins(
    rng: np.random.Generator, probs: np.ndarray | None, num_bins: int, n: int
) -> np.ndarray:
    """(n,) int64 reset bins drawn with `probs` (uniform when None)."""
    if probs is None:
        return rng.integers(0, num_bins, size=n, dtype=np.int64)
    p = np.asarray(probs, dtype=np.float64)
    if p.shape != (num_bins,) or not np.isfinite(p).all() or (p < 0).any() or p.sum() <= 0:
        raise ValueError(f"bin_probs must be {num_bins} finite non-negative numbers, got {p}")
    cdf = np.cumsum(p / p.sum())
    picks = np.searchsorted(cdf, rng.random(n), side="right")
    return np.minimum(picks, num_bins - 1).astype(np.int64)


def episode_rng(seed: int, stream: int) -> np.random.Generator:
    """The generator of one stream of the episode with this seed (independent streams)."""
    if seed < 0:
        raise ValueError(f"episode seeds are >= 0, got {seed}")
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(int(stream),)))


@dataclass(frozen=True)
class ObsSpec:
    """Shape (per env, without the env axis) and dtype of one observation group."""

    shape: tuple[int, ...]
    dtype: str
    """One of OBS_DTYPES: float32 vectors and depth, uint8 images, int64 token ids."""

    def __post_init__(self) -> None:
        if self.dtype not in OBS_DTYPES:
            raise ValueError(f"observation dtype {self.dtype!r} is not one of {OBS_DTYPES}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def is_vector(self) -> bool:
        """A float32 vector group: what MLP policies, normalizers and obs_dims take."""
        return self.dtype == "float32" and len(self.shape) == 1

    @classmethod
    def of(cls, values: np.ndarray) -> ObsSpec:
        """The spec of a batched (n, ...) observation array."""
        return cls(tuple(values.shape[1:]), str(values.dtype))


@dataclass
class StepResult:
    obs: dict[str, np.ndarray]
    """Observation groups after auto-reset, (n, ...) each (see Task.observation_spec)."""
    reward: np.ndarray
    """(n,) float32, the weighted sum of reward terms times control dt."""
    terminated: np.ndarray
    """(n,) bool: the episode ended for a reason inside the MDP (fall, success, instability)."""
    truncated: np.ndarray
    """(n,) bool: the episode hit its time limit; bootstrap from final_obs."""
    final_obs: dict[str, np.ndarray]
    """Observation groups before the reset; meaningful only where terminated | truncated."""
    reward_terms: dict[str, np.ndarray]
    """Each weighted term, (n,), for logging."""
    episode_return: np.ndarray
    """(n,) return of the episode that just ended; NaN where none ended."""
    episode_length: np.ndarray
    """(n,) length in steps of the episode that just ended; 0 where none ended."""
    episode_bin: np.ndarray | None = None
    """(n,) int64 reset bin of the episode that just ended, -1 where none ended (None for a
    task without reset bins)."""
    reasons: dict[str, np.ndarray] = field(default_factory=dict)
    """Termination reason -> (n,) bool, including sim_unstable and time_out."""
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    """Task metrics per env, e.g. success or velocity error; logged as means."""


class Task(abc.ABC):
    robot: ClassVar[RobotSpec]
    control_dt: ClassVar[float]
    """Seconds between two policy actions; substeps = control_dt / model timestep."""
    default_reward_weights: ClassVar[dict[str, float]] = {}
    action_clip: ClassVar[float] = 1.0
    """Actions are clipped to [-action_clip, action_clip] before action_to_ctrl."""
    state_attrs: ClassVar[tuple[str, ...]] = ()
    """Extra (num_envs, ...) array attributes a subclass keeps across steps (commands,
    targets): saved and restored with the task state for bit-exact resume."""
    vocabulary: ClassVar[tuple[str, ...]] = ()
    """Word of each instruction token id this task emits (id = index; `unilab.tasks.
    vocabulary.WORDS` for the tabletop family); () for tasks without instructions. Policies
    size their word embedding from it (`algo.vocab_size`) and export writes it."""
    renderer: BatchRenderer | None = None
    """The camera observations' renderer of a task with cameras (set by the subclass)."""
    action_dim: int
    """Set by subclasses in __init__ (usually the robot's joint count)."""

    def __init__(
        self,
        cfg: TaskConfig,
        num_envs: int,
        seed: int = 0,
        nthread: int = 1,
        sim_cfg: SimConfig | None = None,
    ) -> None:
        self.cfg = cfg
        self.num_envs = num_envs
        self.seed = seed
        self.model = self.build_model()
        substeps = round(self.control_dt / self.model.opt.timestep)
        if substeps < 1 or abs(substeps * self.model.opt.timestep - self.control_dt) > 1e-9:
            raise ValueError(
                f"task {cfg.name!r}: control_dt={self.control_dt} is not a whole multiple of the "
                f"model timestep {self.model.opt.timestep}"
            )
        self.substeps = substeps
        sim_cfg = sim_cfg or SimConfig()
        self.sim = BatchedSim(
            self.model,
            num_envs,
            nthread=nthread,
            substeps=substeps,
            seed=seed,
            randomization=cfg.randomization,
            limits=StabilityLimits(
                max_abs_qpos=sim_cfg.max_abs_qpos,
                max_abs_qvel=sim_cfg.max_abs_qvel,
                max_abs_qacc=sim_cfg.max_abs_qacc,
            ),
            default_keyframe=self.robot.keyframe,
        )
        self.rng = self.sim.rng  # one seeded stream, saved with the sim's snapshot
        self.max_episode_steps = max(1, round(cfg.episode_length_s / self.control_dt))
        self.episode_step = np.zeros(num_envs, dtype=np.int64)
        self.episode_return = np.zeros(num_envs, dtype=np.float64)
        # The current and previous actions, (n, action_dim), for action-rate terms.
        self.actions: np.ndarray = np.zeros((num_envs, self.action_dim), dtype=np.float32)
        self.prev_actions: np.ndarray = np.zeros((num_envs, self.action_dim), dtype=np.float32)
        self.executed_actions: np.ndarray = np.zeros((num_envs, self.action_dim), dtype=np.float32)
        """The actions the last step executed (clipped), kept when an episode ends there:
        `actions` is zeroed for the envs a step resets (their next `previous_action`)."""
        self.reward_weights = self._resolve_reward_weights(cfg.reward_weights)
        self._reward_fns = {name: getattr(self, f"reward_{name}") for name in self.reward_weights}
        self.episode_seeder: EpisodeSeeder | None = None
        """When set, each episode start draws from `episode_rng(seed, TASK_STREAM)` with the
        seed this returns for its env (see the module doc); None: the shared stream."""
        self.episode_seed = np.full(num_envs, -1, dtype=np.int64)
        """(n,) seed of each env's current episode; -1 when it came from the shared stream."""
        self.episode_bin: np.ndarray = np.zeros(num_envs, dtype=np.int64)
        """(n,) reset bin of each env's current episode (see `num_reset_bins`)."""
        self.bin_probs: np.ndarray | None = None
        """Draw probability of each reset bin (None: uniform); the learner's allocation
        (`unilab.runtime.allocation`) sets it in the workers."""

    # -- to implement -------------------------------------------------------------------
    @property
    def num_reset_bins(self) -> int:
        """Discrete starting conditions of this task (target cells, placements, levels):
        each episode starts in a bin drawn with `bin_probs` before `reset_envs`, which
        reads it from `episode_bin`. 1: no bins (the default; nothing is drawn)."""
        return 1

    def build_model(self) -> mujoco.MjModel:
        return load_model(self.robot)

    @abc.abstractmethod
    def action_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        """(n, action_dim) actions in [-action_clip, action_clip] -> (n, nu) controls."""

    @abc.abstractmethod
    def observe(self) -> dict[str, np.ndarray]:
        """Observation groups, (n, ...) each as `observation_spec()` says, with at least `policy`."""

    def observation_spec(self) -> dict[str, ObsSpec]:
        """Group -> shape and dtype. The default reads them off one observe() call; tasks
        whose observe() renders images declare them instead."""
        return {name: ObsSpec.of(values) for name, values in self.observe().items()}

    def success_from_state(self, state: np.ndarray) -> np.ndarray | None:
        """(B,) bool: the task's success judged from `critic` observation vectors (B, D)
        alone, without the simulator (e.g. a world model's predicted state: its generator
        checks its own success head against this rule). None: the task has no such rule."""
        return None

    def observe_after_reset(
        self, ids: np.ndarray, obs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Observations after envs ids were reset within step(); obs holds this step's
        observations (the caller kept its own copy). The default observes everything again;
        tasks with costly groups (images) recompute only the rows of ids."""
        return self.observe()

    def terminations(self) -> dict[str, np.ndarray]:
        return {}

    def reset_envs(self, ids: np.ndarray) -> None:
        self.sim.reset(ids, keyframe=self.robot.keyframe)

    def task_metrics(self) -> dict[str, np.ndarray]:
        """Per-env metrics logged as means (e.g. success, tracking error)."""
        return {}

    @property
    def render_s(self) -> float:
        """Seconds this task has spent rendering camera observations (0 without cameras);
        a worker reports it apart from the rest of `step`."""
        return float(self.renderer.render_s) if self.renderer is not None else 0.0

    def close(self) -> None:
        """Release what the task holds beyond memory (a renderer's GL context); idempotent.
        Tasks without such resources need not override it."""
        return None

    # -- the shared machinery ---------------------------------------------------------------
    def _resolve_reward_weights(self, overrides: dict[str, float]) -> dict[str, float]:
        weights = dict(self.default_reward_weights)
        unknown = sorted(set(overrides) - set(weights))
        if unknown:
            raise ValueError(
                f"task {self.cfg.name!r}: unknown reward term(s) {', '.join(unknown)}; "
                f"terms are {', '.join(sorted(weights))}"
            )
        weights.update(overrides)
        missing = [n for n in weights if not callable(getattr(self, f"reward_{n}", None))]
        if missing:
            raise ValueError(f"task {self.cfg.name!r}: no method reward_<name> for {missing}")
        return {name: float(w) for name, w in weights.items() if w != 0.0}

    @property
    def obs_dims(self) -> dict[str, int]:
        """Widths of the float32 vector groups (policy, critic); images and token ids are
        in observation_spec()."""
        return {k: v.shape[0] for k, v in self.observation_spec().items() if v.is_vector}

    def _start_episodes(self, ids: np.ndarray) -> None:
        """reset_envs(ids), from per-episode generators when an episode_seeder is set. A task
        with reset bins draws each episode's bin first, from the same generator."""
        bins = self.num_reset_bins
        if self.episode_seeder is None:
            if bins > 1:
                self.episode_bin[ids] = draw_bins(self.rng, self.bin_probs, bins, ids.size)
            self.reset_envs(ids)
            self.episode_seed[ids] = -1
            return
        seeds = np.asarray(self.episode_seeder(ids), dtype=np.int64).reshape(-1)
        if seeds.shape != ids.shape:
            raise ValueError(f"episode_seeder gave {seeds.shape[0]} seeds for {ids.size} envs")
        shared = self.rng
        try:
            for env, seed in zip(ids.tolist(), seeds.tolist(), strict=True):
                self.rng = episode_rng(seed, TASK_STREAM)
                if bins > 1:
                    self.episode_bin[env] = draw_bins(self.rng, self.bin_probs, bins, 1)[0]
                self.reset_envs(np.array([env], dtype=np.int64))
        finally:
            self.rng = shared
        self.episode_seed[ids] = seeds

    def reset(self) -> dict[str, np.ndarray]:
        ids = np.arange(self.num_envs)
        self._start_episodes(ids)
        self.episode_step[:] = 0
        self.episode_return[:] = 0.0
        self.actions[:] = 0.0
        self.prev_actions[:] = 0.0
        return self._noisy(self.observe())

    def restart(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Start new episodes in envs `ids` now, as `step`'s auto-reset does; returns the
        observation groups of every env (rows outside `ids` as they are). For adapters that
        reset on the next step (gymnasium's NEXT_STEP autoreset)."""
        ids = np.asarray(ids, dtype=np.int64)
        self._start_episodes(ids)
        self.episode_step[ids] = 0
        self.episode_return[ids] = 0.0
        self.actions[ids] = 0.0
        self.prev_actions[ids] = 0.0
        return self._noisy(self.observe())

    def step(self, actions: np.ndarray) -> StepResult:
        actions = np.asarray(actions, dtype=np.float32)
        if actions.shape != (self.num_envs, self.action_dim):
            raise ValueError(
                f"actions have shape {actions.shape}; expected ({self.num_envs}, {self.action_dim})"
            )
        lim = self.action_clip
        actions = np.clip(np.nan_to_num(actions, nan=0.0, posinf=lim, neginf=-lim), -lim, lim)
        self.prev_actions, self.actions = self.actions, actions.copy()
        self.executed_actions = actions
        status = self.sim.step(self.action_to_ctrl(actions))
        self.episode_step += 1

        terms = {n: w * self.control_dt * fn() for n, (w, fn) in self._weighted_fns()}
        reward = np.sum(list(terms.values()), axis=0) if terms else np.zeros(self.num_envs)
        reasons = self.terminations()
        unstable = status.unstable
        reasons[SIM_UNSTABLE] = unstable
        terminated = np.logical_or.reduce(list(reasons.values()))
        truncated = (self.episode_step >= self.max_episode_steps) & ~terminated
        reasons[TIME_OUT] = truncated
        reward = np.where(unstable, 0.0, reward).astype(np.float32)
        self.episode_return += reward
        metrics = self.task_metrics()

        obs = self.observe()
        done = terminated | truncated
        episode_return = np.where(done, self.episode_return, np.nan)
        episode_length = np.where(done, self.episode_step, 0)
        ended_bin = np.where(done, self.episode_bin, -1) if self.num_reset_bins > 1 else None
        final_obs = obs
        if done.any():
            final_obs = {k: v.copy() for k, v in obs.items()}
            ids = np.flatnonzero(done)
            self._start_episodes(ids)
            self.episode_step[ids] = 0
            self.episode_return[ids] = 0.0
            self.actions[ids] = 0.0
            self.prev_actions[ids] = 0.0
            obs = self.observe_after_reset(ids, obs)
        return StepResult(
            obs=self._noisy(obs),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            reward_terms={k: v.astype(np.float32) for k, v in terms.items()},
            episode_return=episode_return.astype(np.float32),
            episode_length=episode_length,
            episode_bin=ended_bin,
            reasons=reasons,
            extras=metrics,
        )

    def _weighted_fns(self) -> list[tuple[str, tuple[float, Any]]]:
        return [(n, (w, self._reward_fns[n])) for n, w in self.reward_weights.items()]

    def _noisy(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.cfg.obs_noise <= 0.0:
            return obs
        policy = obs["policy"]
        noise = self.rng.uniform(-1.0, 1.0, size=policy.shape).astype(np.float32)
        return {**obs, "policy": policy + self.cfg.obs_noise * noise}

    # -- state for bit-exact resume -------------------------------------------------------------
    _BASE_STATE = ("episode_step", "episode_return", "actions", "prev_actions")

    def get_state(self) -> dict[str, np.ndarray]:
        """Everything the next steps depend on besides the sim, as plain arrays."""
        names = self._BASE_STATE + self.state_attrs + ("episode_bin",)
        return {name: np.array(getattr(self, name)) for name in names}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        if "episode_bin" in state:  # absent from states saved before reset bins existed
            self.episode_bin = np.asarray(state["episode_bin"], dtype=np.int64).copy()
        for name in self._BASE_STATE + self.state_attrs:
            current = getattr(self, name)
            if state[name].shape != current.shape:
                raise ValueError(
                    f"task state {name!r} has shape {state[name].shape}; expected {current.shape}"
                )
            setattr(self, name, state[name].astype(current.dtype))
        self.state_restored(np.arange(self.num_envs))

    def state_restored(self, ids: np.ndarray) -> None:
        """Called after set_state or restore_env wrote the state of envs ids: refresh what the
        task derives from its state_attrs outside them (a renderer's per-env looks). The
        default has nothing to refresh."""
        return None

    def _env_rows(self) -> tuple[str, ...]:
        """The per-env task arrays an `EnvState` holds (the bin only for a task with bins,
        so states saved without bins still fit)."""
        bins = ("episode_bin",) if self.num_reset_bins > 1 else ()
        return self._BASE_STATE + self.state_attrs + bins

    def save_env(self, env: int) -> EnvState:
        """Everything env env's next steps depend on: its physics and its task rows."""
        env = env_index(env, self.num_envs)
        rows = {}
        for name in self._env_rows():
            values = getattr(self, name)
            if not isinstance(values, np.ndarray) or values.shape[:1] != (self.num_envs,):
                raise TypeError(
                    f"task {self.cfg.name!r}: state attribute {name!r} is not a (num_envs, ...)"
                    " array, so it has no per-env row"
                )
            rows[name] = values[env]
        return EnvState(
            task=self.cfg.name,
            sim=self.sim.env_snapshot(env),
            arrays=rows,
            episode_seed=int(self.episode_seed[env]),
        )

    def fork_env(self, source: int, targets: np.ndarray) -> None:
        """Continue env `source` in envs `targets` too: each becomes an exact copy of its
        physics and task rows (branching rollouts; siblings then diverge through their own
        actions). Read the new observations with `observation()` once all forks are done."""
        state = self.save_env(source)
        ids = np.array([env_index(e, self.num_envs) for e in np.asarray(targets).tolist()])
        for env in ids.tolist():
            self._write_env(int(env), state)
        self.state_restored(ids.astype(np.int64))

    def observation(self) -> dict[str, np.ndarray]:
        """The observation groups of every env now, as step and reset return them."""
        return self._noisy(self.observe())

    def restore_env(self, env: int, state: EnvState) -> dict[str, np.ndarray]:
        """Put env env into state (saved from any env of a task built from the same config,
        possibly another instance); returns the observation groups of every env, as restart.

        The env then continues exactly as the saved one did under the same actions, until its
        episode ends: later episode starts, like observation noise, draw from the task's shared
        stream (or its episode_seeder), which no env state holds.
        """
        env = env_index(env, self.num_envs)
        if not isinstance(state, EnvState):
            raise TypeError(f"state must be an EnvState, got {type(state).__name__}")
        if state.task != self.cfg.name:
            raise ValueError(
                f"the env state is of task {state.task!r}; this task is {self.cfg.name!r}"
            )
        names = self._env_rows()
        if set(state.arrays) != set(names):
            missing = sorted(set(names) - set(state.arrays))
            extra = sorted(set(state.arrays) - set(names))
            raise ValueError(
                f"task {self.cfg.name!r}: the env state lacks {missing} and has unknown {extra}"
            )
        for name in names:
            current, row = getattr(self, name), state.arrays[name]
            if row.shape != current.shape[1:] or row.dtype != current.dtype:
                raise ValueError(
                    f"task {self.cfg.name!r}: env state {name!r} is {row.dtype} {row.shape}; this"
                    f" task's rows are {current.dtype} {current.shape[1:]}"
                )
        self._write_env(env, state)
        self.state_restored(np.array([env], dtype=np.int64))
        return self._noisy(self.observe())

    def _write_env(self, env: int, state: EnvState) -> None:
        self.sim.restore_env(env, state.sim)  # checks the snapshot before it writes
        for name in self._env_rows():
            getattr(self, name)[env] = state.arrays[name]
        self.episode_seed[env] = state.episode_seed

    def metadata(self) -> dict[str, Any]:
        """What export writes next to the policy."""
        spec = self.robot
        return {
            "task": self.cfg.name,
            "robot": spec.name,
            "joint_names": list(spec.joint_names),
            "default_pose": list(spec.default_pose),
            "kp": list(spec.kp),
            "kd": list(spec.kd),
            "action_scale": spec.action_scale,
            "control_dt": self.control_dt,
            "obs_dims": self.obs_dims,
        }
