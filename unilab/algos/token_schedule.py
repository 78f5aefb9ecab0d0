"""Which exploration token the next rollout episodes explore under: the learner's side.

The workers draw one token per episode from a probability vector that travels with the
weights (`unilab.policies.vla.tokens.TokenSampler.probs`); after each batch the learner
folds the finished episodes' outcomes (the token they ran under, success 1/0) into
per-token statistics and sets the next vector:

- `uniform`: 1/K each;
- `count`: in proportion to 1 / (1 + episodes run under the token), so rarely tried tokens
  catch up;
- `bandit`: a Beta(a, b) posterior per token over its success rate (evidence decayed each
  update, so it follows an improving policy); the probability of a token is how often it
  wins a Thompson draw (the argmax of one sample from every posterior), estimated from
  `draws` joint samples. Drawing per episode from these win frequencies is Thompson
  sampling per episode, without sending the posteriors to every worker.

Every schedule mixes in `floor`/K per token, so no token starves and its statistics keep
moving.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SCHEDULES = ("uniform", "count", "bandit")


class TokenSchedule:
    def __init__(
        self,
        n_tokens: int,
        mode: str = "uniform",
        *,
        decay: float = 0.95,
        floor: float = 0.2,
        draws: int = 4096,
        seed: int = 0,
    ) -> None:
        if n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        if mode not in SCHEDULES:
            raise ValueError(f"token schedule {mode!r} is not one of {', '.join(SCHEDULES)}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"token schedule decay must be in (0, 1], got {decay}")
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"token schedule floor must be in [0, 1], got {floor}")
        self.n_tokens, self.mode = int(n_tokens), mode
        self.decay, self.floor, self.draws = float(decay), float(floor), int(draws)
        self.rng = np.random.default_rng(seed)
        self.alpha: np.ndarray = np.ones(self.n_tokens)
        self.beta: np.ndarray = np.ones(self.n_tokens)
        self.episodes: np.ndarray = np.zeros(self.n_tokens)

    def update(self, tokens: np.ndarray, outcomes: np.ndarray) -> None:
        """Fold in finished episodes: the token each ran under and its outcome (1/0)."""
        tokens = np.asarray(tokens, np.int64).reshape(-1)
        outcomes = np.asarray(outcomes, np.float64).reshape(-1)
        if tokens.shape != outcomes.shape:
            raise ValueError(f"{tokens.size} tokens but {outcomes.size} outcomes")
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.n_tokens):
            raise ValueError(f"tokens must be in 0..{self.n_tokens - 1}, got {tokens.tolist()}")
        self.alpha = 1.0 + self.decay * (self.alpha - 1.0)
        self.beta = 1.0 + self.decay * (self.beta - 1.0)
        self.episodes *= self.decay
        wins = np.bincount(tokens, weights=outcomes, minlength=self.n_tokens)
        runs = np.bincount(tokens, minlength=self.n_tokens).astype(np.float64)
        self.alpha += wins
        self.beta += runs - wins
        self.episodes += runs

    def mean_success(self) -> np.ndarray:
        return self.alpha / (self.alpha + self.beta)

    def probs(self) -> np.ndarray:
        """(K,) draw probability per token for the next episodes."""
        k = self.n_tokens
        if self.mode == "uniform":
            return np.full(k, 1.0 / k)
        if self.mode == "count":
            score = 1.0 / (1.0 + self.episodes)
        else:
            samples = self.rng.beta(self.alpha, self.beta, size=(self.draws, k))
            score = np.bincount(samples.argmax(1), minlength=k).astype(np.float64)
        score = score / score.sum()
        return self.floor / k + (1.0 - self.floor) * score

    def state_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha.tolist(),
            "beta": self.beta.tolist(),
            "episodes": self.episodes.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha = np.asarray(state["alpha"], np.float64)
        self.beta = np.asarray(state["beta"], np.float64)
        self.episodes = np.asarray(state["episodes"], np.float64)
