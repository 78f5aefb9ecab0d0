"""Any unilab task as a gymnasium 1.x `VectorEnv` (and, for one env, a `gymnasium.Env`).

A task steps all of its envs at once and resets ended envs inside `step`. The wrapper offers
both of gymnasium's autoreset modes (https://farama.org/Vector-Autoreset-Mode):

- `AutoresetMode.NEXT_STEP` (the default, gymnasium's own): the step that ends an episode
  returns its last observation; the next step starts a new episode in that env (its action
  is ignored; reward 0, not terminated, not truncated). gymnasium's vector wrappers
  (`NormalizeObservation`, `RecordEpisodeStatistics`, ...) work on top. The env was stepped
  once more in the task's batch, then restarted (`Task.restart`): it costs one extra reset.
- `AutoresetMode.SAME_STEP` (the task's own way, no extra work): the step that ends an
  episode returns the first observation of the new one in `obs`, and the last observation
  of the ended one in `infos["final_obs"]` (an object array, `None` where no episode ended)
  with the mask `infos["_final_obs"]`. gymnasium's observation wrappers refuse this mode.

Episode ends carry `episode_return`, `episode_length` and `ended_by_<reason>` (with `_<key>`
masks): in `infos` (NEXT_STEP) or `infos["final_info"]` (SAME_STEP).

    env = TaskVectorEnv("mjcf", num_envs=16, seed=0, mjcf_path="gymnasium:ant.xml")
    obs, infos = env.reset(seed=0)
    obs, rewards, terminations, truncations, infos = env.step(env.action_space.sample())
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium
import numpy as np
import yaml
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from unilab.config import compose
from unilab.config.schema import TaskConfig
from unilab.tasks.base import StepResult, Task
from unilab.tasks.registry import make_task

OBS_MODES = ("policy", "dict")
AUTORESET_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)


def _autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    """An AutoresetMode from itself, its value ("NextStep") or its name ("next_step")."""
    for known in AUTORESET_MODES:
        if mode == known or (
            isinstance(mode, str) and mode.lower() in (known.value.lower(), known.name.lower())
        ):
            return known
    raise ValueError(
        f"autoreset_mode={mode!r} is not supported; use AutoresetMode.NEXT_STEP (gymnasium's "
        "default, works with its observation wrappers) or AutoresetMode.SAME_STEP (no extra reset)"
    )


def _override_token(key: str, value: Any) -> str:
    """`task.key=value` with the value written as a YAML scalar or flow list/dict."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip()
    return f"task.{key}={text.removesuffix('...').strip()}"


def build_task(
    task: str | TaskConfig | Task,
    num_envs: int | None,
    seed: int,
    nthread: int,
    overrides: dict[str, Any],
) -> Task:
    """A task from a registered name (with its preset and `task.<key>` overrides), a task
    config, or an existing task (used as it is)."""
    if isinstance(task, Task):
        if overrides:
            raise ValueError(
                f"config overrides {sorted(overrides)} cannot apply to an existing task; "
                "pass the task name or a TaskConfig instead"
            )
        if num_envs is not None and num_envs != task.num_envs:
            raise ValueError(f"num_envs={num_envs} but the given task has {task.num_envs} envs")
        return task
    n = 1 if num_envs is None else num_envs
    if isinstance(task, TaskConfig):
        cfg = dataclasses.replace(task, **overrides) if overrides else task
        return make_task(cfg, num_envs=n, seed=seed, nthread=nthread)
    if not isinstance(task, str):
        raise TypeError(f"task must be a task name, a TaskConfig or a Task, got {type(task)}")
    config = compose([f"task={task}", *(_override_token(k, v) for k, v in overrides.items())])
    return make_task(config.task, num_envs=n, seed=seed, nthread=nthread, sim_cfg=config.sim)


def reseed(task: Task, seed: int) -> None:
    """Restart the task's random streams (reset sampling and randomization) from `seed`."""
    task_seed, dr_seed = np.random.SeedSequence(seed).spawn(2)
    snap = task.sim.snapshot()
    task.sim.restore(
        dataclasses.replace(
            snap,
            rng_state=dict(np.random.default_rng(task_seed).bit_generator.state),
            randomization_rng_state=dict(np.random.default_rng(dr_seed).bit_generator.state),
        )
    )


def _with_masks(values: dict[str, Any], mask: np.ndarray) -> dict[str, Any]:
    """gymnasium's vector info layout: each key paired with a `_key` mask of the envs that
    have it."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        out[key] = value
        out[f"_{key}"] = mask.copy()
    return out


def _box(dim: int) -> spaces.Box:
    return spaces.Box(-np.inf, np.inf, shape=(dim,), dtype=np.float32)


class TaskVectorEnv(VectorEnv):
    """A unilab task as a gymnasium vector env; all envs step in one batched call.

    task: a registered task name (its preset applies; keyword overrides set `task.<key>`),
    a TaskConfig, or a Task. obs_mode "policy" gives the policy group as a Box; "dict"
    gives every observation group as a Dict space. autoreset_mode: NEXT_STEP (default) or
    SAME_STEP, see the module doc.
    """

    def __init__(
        self,
        task: str | TaskConfig | Task,
        num_envs: int | None = None,
        seed: int = 0,
        *,
        nthread: int = 1,
        obs_mode: str = "policy",
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        **overrides: Any,
    ) -> None:
        if obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode={obs_mode!r}; expected one of {OBS_MODES}")
        self.autoreset_mode = _autoreset_mode(autoreset_mode)
        self.task = build_task(task, num_envs, seed, nthread, overrides)
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": []}
        self.num_envs = self.task.num_envs
        self.obs_mode = obs_mode
        dims = self.task.obs_dims
        if obs_mode == "policy":
            self.single_observation_space: spaces.Space[Any] = _box(dims["policy"])
        else:
            self.single_observation_space = spaces.Dict({k: _box(d) for k, d in dims.items()})
        clip = float(self.task.action_clip)
        self.single_action_space: spaces.Space[Any] = spaces.Box(
            -clip, clip, shape=(self.task.action_dim,), dtype=np.float32
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        # NEXT_STEP: envs whose episode ended in the previous step; they restart in this one.
        self._restart_next = np.zeros(self.num_envs, dtype=bool)

    def _obs(self, groups: dict[str, np.ndarray]) -> Any:
        # Copies: users keep what they are given, and a task may reuse its buffers.
        if self.obs_mode == "policy":
            return np.array(groups["policy"], dtype=np.float32)
        return {k: np.array(v, dtype=np.float32) for k, v in groups.items()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None and not isinstance(seed, int | np.integer):
            raise TypeError(
                f"seed must be one int for the whole batch (or None), got {type(seed).__name__}"
            )
        if options:
            raise ValueError(f"TaskVectorEnv.reset takes no options, got {sorted(options)}")
        super().reset(seed=seed)
        if seed is not None:
            reseed(self.task, int(seed))
        self._restart_next[:] = False
        return self._obs(self.task.reset()), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        res = self.task.step(np.asarray(actions, dtype=np.float32))
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            return self._same_step(res)
        return self._next_step(res)

    def _same_step(self, res: StepResult) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs = self._obs(res.obs)
        every = np.ones(self.num_envs, dtype=bool)
        infos = _with_masks({"reward_terms": _with_masks(res.reward_terms, every)}, every)
        done = res.terminated | res.truncated
        if done.any():
            ids = np.flatnonzero(done)
            final = self._obs(res.final_obs)
            final_obs = np.full(self.num_envs, None, dtype=object)
            if self.obs_mode == "policy":
                final_obs[ids] = list(final[ids])
            else:
                final_obs[ids] = [{k: v[i] for k, v in final.items()} for i in ids]
            infos.update(
                final_obs=final_obs, _final_obs=done, final_info=self._episode_info(res, done)
            )
        return obs, res.reward.astype(np.float64), res.terminated, res.truncated, infos

    def _next_step(self, res: StepResult) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        restart = self._restart_next
        groups = res.obs
        reward = res.reward.astype(np.float64)
        terminated, truncated = res.terminated.copy(), res.truncated.copy()
        terms = res.reward_terms
        if restart.any():
            # These envs ended last step; the task already stepped them once into a new
            # episode, so start that episode again and report its first observation.
            fresh = self.task.restart(np.flatnonzero(restart))
            groups = {k: np.where(restart[:, None], fresh[k], v) for k, v in groups.items()}
            reward[restart] = 0.0
            terminated[restart] = truncated[restart] = False
            terms = {k: np.where(restart, 0.0, v).astype(v.dtype) for k, v in terms.items()}
        done = terminated | truncated
        if done.any():  # the step that ends an episode shows its last observation
            groups = {k: np.where(done[:, None], res.final_obs[k], v) for k, v in groups.items()}
        stepped = ~restart
        infos = _with_masks({"reward_terms": _with_masks(terms, stepped)}, stepped)
        if done.any():
            infos.update(self._episode_info(res, done))
        self._restart_next = done
        return self._obs(groups), reward, terminated, truncated, infos

    @staticmethod
    def _episode_info(res: StepResult, done: np.ndarray) -> dict[str, Any]:
        info: dict[str, np.ndarray] = {
            "episode_return": np.where(done, res.episode_return, np.nan).astype(np.float32),
            "episode_length": np.where(done, res.episode_length, 0),
        }
        info.update({f"ended_by_{k}": v & done for k, v in res.reasons.items()})
        return _with_masks(info, done)

    def close_extras(self, **kwargs: Any) -> None:
        del self.task


class TaskEnv(gymnasium.Env):
    """One env of a task as a plain `gymnasium.Env` (for tools that want a single env).

    When an episode ends, step returns its last observation; call reset() before stepping on.
    """

    def __init__(
        self, task: str | TaskConfig | Task, seed: int = 0, *, obs_mode: str = "policy", **kw: Any
    ) -> None:
        self.vec = TaskVectorEnv(
            task,
            num_envs=1,
            seed=seed,
            obs_mode=obs_mode,
            autoreset_mode=AutoresetMode.SAME_STEP,
            **kw,
        )
        self.metadata = {"render_modes": []}
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space

    def _row(self, obs: Any) -> Any:
        if isinstance(obs, dict):
            return {k: v[0] for k, v in obs.items()}
        return obs[0]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        obs, _ = self.vec.reset(seed=seed, options=options)
        return self._row(obs), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, infos = self.vec.step(np.asarray(action)[None])
        ended = bool(terminated[0] or truncated[0])
        obs = infos["final_obs"][0] if ended else self._row(obs)
        terms = infos["reward_terms"]
        info = {k: float(v[0]) for k, v in terms.items() if not k.startswith("_")}
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def close(self) -> None:
        self.vec.close()
