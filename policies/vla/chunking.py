"""Chunked execution: run `n_act` actions of each predicted chunk of H, then re-plan.

`ChunkExecutor` is a small stateful wrapper a rollout loop drives once per env step:
`executor(obs) -> (N, A)` actions, `executor.reset(envs)` after those envs reset. It is
numpy only and takes any planner `plan(obs, noise) -> (n, H, A)`: the torch policy's
(`VLAPolicy.planner()`) or the torch-free onnxruntime runner's, so play, eval and deploy
execute chunks the same way.

- Each env re-plans on its own schedule (after a reset it re-plans at once); only the envs
  that need a new chunk are passed to the planner, as a sub-batch.
- The initial noise of every plan comes from one `numpy.random.Generator(seed)`, drawn in
  env order: the same seed, observations and call sequence give the same actions.
- Temporal ensembling (ACT, Zhao et al. 2023): every prediction of the action for the
  current step is averaged with weights w = exp(-m * i), i = 0 for the oldest prediction.
  For a target step the prediction made at chunk index j is older the larger j is, so the
  weight is exp(-m * (H - 1 - j)) up to a factor common to that step; the executor keeps
  running weighted sums over a sliding window. m > 0 favours older predictions (ACT's
  choice, m = 0.01), m = 0 averages, m < 0 favours newer ones. Use it with small `n_act`
  (ACT re-plans every step).
- `noise_temperature` scales the initial noise of every plan (1.0: the flow's own N(0, I);
  below 1 draws closer to the mode, 0 is the deterministic chunk). The random stream is
  the same at every temperature, so runs that differ only in it see the same draws.
- A per-episode choice (`hold=(key, choose)`: the token selector): at an env's first plan
  of an episode `choose(obs)` picks the value of observation input `key` for it, and every
  later plan of that episode is fed the same value, as rollouts explore under one token
  per episode. Re-choosing at every chunk lets a state-conditioned choice switch between
  behaviours mid-episode (around a wall left, then right). Observations that carry `key`
  themselves (an explicit token) bypass the hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

Planner = Callable[[Mapping[str, np.ndarray], np.ndarray], np.ndarray]
"""(observations of n envs, noise (n, H, A) float32) -> action chunks (n, H, A)."""
EpisodeChoice = Callable[[Mapping[str, np.ndarray]], np.ndarray]
"""(observations of n envs at their episode's first plan) -> (n,) int64 values >= 0 of the
input the executor then holds for the rest of each episode."""


class ChunkExecutor:
    def __init__(
        self,
        plan: Planner,
        num_envs: int,
        horizon: int,
        action_dim: int,
        n_act: int,
        ensemble_decay: float | None = None,
        seed: int = 0,
        noise_temperature: float = 1.0,
        hold: tuple[str, EpisodeChoice] | None = None,
    ) -> None:
        if num_envs < 1 or horizon < 1 or action_dim < 1:
            raise ValueError(
                f"need num_envs, horizon, action_dim >= 1; got {num_envs}, {horizon}, {action_dim}"
            )
        if not 1 <= n_act <= horizon:
            raise ValueError(f"n_act must be in [1, horizon={horizon}], got {n_act}")
        if not (np.isfinite(noise_temperature) and noise_temperature >= 0):
            raise ValueError(
                f"noise_temperature must be a finite number >= 0, got {noise_temperature}"
            )
        self.plan = plan
        self.num_envs = num_envs
        self.horizon = horizon
        self.action_dim = action_dim
        self.n_act = n_act
        self.ensemble_decay = ensemble_decay
        self.seed = seed
        self.noise_temperature = float(noise_temperature)
        self.rng = np.random.default_rng(seed)
        self._chunk = np.zeros((num_envs, horizon, action_dim), np.float32)
        self._since_plan = np.full(num_envs, n_act, np.int64)  # n_act: plan on next call
        if ensemble_decay is not None:
            j = np.arange(horizon, dtype=np.float64)
            self._weights = np.exp(-ensemble_decay * (horizon - 1 - j))
            self._weights /= self._weights.max()
            self._sum_w = np.zeros((num_envs, horizon))
            self._sum_wa = np.zeros((num_envs, horizon, action_dim))
        self.replanned = np.zeros(num_envs, bool)
        """Which envs got a new chunk in the last call (chunk boundaries for learners)."""
        self.hold = hold
        self.held = np.full(num_envs, -1, np.int64)
        """(N,) each env's held value for its episode (-1: not chosen yet)."""

    def reset(self, envs: Sequence[int] | np.ndarray | None = None) -> None:
        """Forget the chunks of these envs (all when None); they re-plan on the next call."""
        idx = np.arange(self.num_envs) if envs is None else np.asarray(envs, np.int64)
        self._since_plan[idx] = self.n_act
        self.held[idx] = -1
        if self.ensemble_decay is not None:
            self._sum_w[idx] = 0.0
            self._sum_wa[idx] = 0.0

    def _held_values(self, need: np.ndarray, sub: Mapping[str, np.ndarray]) -> np.ndarray:
        """(len(need),) the held values of these envs, choosing for those without one."""
        assert self.hold is not None
        key, choose = self.hold
        fresh = np.flatnonzero(self.held[need] < 0)
        if fresh.size:
            chosen = np.asarray(choose({k: v[fresh] for k, v in sub.items()}), np.int64)
            if chosen.shape != (fresh.size,) or (chosen < 0).any():
                raise ValueError(
                    f"episode choice for {key!r} returned {chosen.shape} values "
                    f"(min {chosen.min() if chosen.size else None}); expected "
                    f"({fresh.size},) values >= 0"
                )
            self.held[need[fresh]] = chosen
        return self.held[need].copy()

    def reseed(self, seed: int) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """(N, A) float32 actions for this step."""
        need = np.flatnonzero(self._since_plan >= self.n_act)
        self.replanned[:] = False
        if need.size:
            sub = {k: np.asarray(v)[need] for k, v in obs.items()}
            if self.hold is not None and self.hold[0] not in obs:
                sub[self.hold[0]] = self._held_values(need, sub)
            noise = self.rng.standard_normal(
                (need.size, self.horizon, self.action_dim), dtype=np.float32
            )
            if self.noise_temperature != 1.0:
                noise *= np.float32(self.noise_temperature)
            chunks = np.asarray(self.plan(sub, noise), dtype=np.float32)
            want = (need.size, self.horizon, self.action_dim)
            if chunks.shape != want:
                raise ValueError(f"planner returned shape {chunks.shape}; expected {want}")
            self._chunk[need] = chunks
            self._since_plan[need] = 0
            self.replanned[need] = True
            if self.ensemble_decay is not None:
                self._sum_w[need] += self._weights
                self._sum_wa[need] += self._weights[None, :, None] * chunks
        rows = np.arange(self.num_envs)
        if self.ensemble_decay is None:
            actions = self._chunk[rows, self._since_plan].copy()
        else:
            actions = (self._sum_wa[:, 0] / self._sum_w[:, :1]).astype(np.float32)
            self._sum_w[:, :-1] = self._sum_w[:, 1:].copy()
            self._sum_wa[:, :-1] = self._sum_wa[:, 1:].copy()
            self._sum_w[:, -1] = 0.0
            self._sum_wa[:, -1] = 0.0
        self._since_plan += 1
        return actions
