"""Exploration tokens at rollout and at deployment.

`TokenSampler`: in RL rollouts each env explores under one behaviour token per episode.
The draw probabilities are a buffer (`probs`), so they travel with the published weights
and every worker draws with the learner's current schedule (uniform, count-based or a
bandit: `unilab.algos.token_schedule`); a worker tells the policy where episodes ended
(`episodes_ended`) and the next chunk planned for such an env draws a fresh token.

`TokenSelector`: at deployment nobody chooses the token, so a small head picks it from
the observation (wherever the token input is absent or `SELECT_TOKEN`, -2): logits over the K tokens from the prefix encoded with the null token
(what the policy sees before any token is chosen). Its input is detached: training the
selector never moves the policy. The learner trains it by advantage-weighted
cross-entropy on the tokens its rollouts used (`unilab.algos.flow_ppo`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from unilab.policies.vla.prefix import Prefix

SELECT_TOKEN = -2
"""Token input value that asks the selector (-1 is the null token, 0..K-1 explicit)."""


class TokenSampler(nn.Module):
    probs: torch.Tensor

    def __init__(self, n_tokens: int, seed: int = 0) -> None:
        super().__init__()
        self.n_tokens = n_tokens
        self.register_buffer("probs", torch.full((n_tokens,), 1.0 / n_tokens))
        self.rng = np.random.default_rng(seed)
        self.current: np.ndarray | None = None
        """(N,) each env's token for its current episode."""
        self.fresh: np.ndarray | None = None
        """(N,) True where the env's next chunk starts an episode (draw a new token)."""

    def seed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def tokens(self, n: int) -> np.ndarray:
        """(n,) int64 token per env, drawing for envs that start an episode."""
        if self.current is None or self.current.shape[0] != n or self.fresh is None:
            self.current = np.zeros(n, np.int64)
            self.fresh = np.ones(n, bool)
        k = int(self.fresh.sum())
        if k:
            p = self.probs.detach().cpu().double().numpy().clip(min=0.0)
            p = p / p.sum() if p.sum() > 0 else np.full(self.n_tokens, 1.0 / self.n_tokens)
            self.current[self.fresh] = self.rng.choice(self.n_tokens, size=k, p=p)
            self.fresh[:] = False
        return self.current.copy()

    def episodes_ended(self, ended: np.ndarray) -> None:
        ended = np.asarray(ended, bool)
        if self.fresh is None or self.fresh.shape != ended.shape:
            self.fresh = np.ones(ended.shape[0], bool)
            self.current = np.zeros(ended.shape[0], np.int64)
        self.fresh |= ended


class TokenSelector(nn.Module):
    def __init__(self, width: int, n_tokens: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, width), nn.SiLU(), nn.Linear(width, n_tokens)
        )

    @staticmethod
    def features(prefix: Prefix) -> torch.Tensor:
        """(N, width) the selector's input: the mean of the valid prefix tokens, detached
        (training the selector never moves the policy)."""
        keep = prefix.valid.to(prefix.tokens.dtype)[..., None]
        return ((prefix.tokens * keep).sum(1) / keep.sum(1).clamp_min(1.0)).detach()

    def forward(self, prefix: Prefix) -> torch.Tensor:
        """(N, K) logits."""
        logits: torch.Tensor = self.net(self.features(prefix))
        return logits
