"""Planning for chunked execution: the numpy planner `chunking.ChunkExecutor` calls with a
`VLAPolicy`, and best-of-N candidate selection by the policy's own value heads.

`make_planner(policy, ...)` is what `VLAPolicy.planner()` returns: (obs as numpy, noise (n, H, A))
-> chunks (n, H, A) numpy from the deterministic path. With `best_of_n` > 1 it plans N
candidates per env, each with its own behaviour token (`best_of_n_candidates`), and keeps the
one the value heads rank highest (`rank_candidates`); `check_best_of_n` says whether a
policy can do so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch

from unilab.policies.vla.chunking import Planner

if TYPE_CHECKING:
    from unilab.policies.vla.policy import VLAPolicy


def make_planner(
    policy: VLAPolicy,
    guidance_scale: float | None = None,
    best_of_n: int = 1,
    noise_temperature: float = 1.0,
    seed: int = 0,
    flow_steps: int | None = None,
) -> Planner:
    """(obs as numpy, noise (n, H, A)) -> chunks (n, H, A) numpy: `policy`'s deterministic
    path with the given noise, for `chunking.ChunkExecutor`.

    `guidance_scale` (None: the configured one) integrates with classifier-free
    guidance at that scale. `best_of_n` > 1 plans N candidates per env and keeps the one
    the value heads rank highest (`best_of_n_candidates`): candidate 0 from the given
    noise, the others from a stream seeded by `seed`, scaled by `noise_temperature`.
    `flow_steps` (None: the policy's K) integrates each chunk in that many Euler steps: the
    velocity field is the same at any K, so this is an inference setting, not a new model."""
    scale = policy.cfg.guidance_scale if guidance_scale is None else float(guidance_scale)
    steps = policy.num_steps if flow_steps is None else int(flow_steps)
    if steps < 1:
        raise ValueError(f"flow_steps must be at least 1, got {flow_steps}")
    if best_of_n > 1:
        policy.check_best_of_n()
    rng = np.random.default_rng([int(seed), 0x0B0F])

    def chunks(obs: Mapping[str, np.ndarray], noise: np.ndarray) -> torch.Tensor:
        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in obs.items()}
        as_trained = scale == policy.cfg.guidance_scale and steps == policy.num_steps
        if policy.gaussian is not None or as_trained:
            chunk, _ = policy.sample(tensors, deterministic=True, noise=torch.from_numpy(noise))
            return chunk
        with torch.inference_mode():
            policy.check_obs(tensors)
            out = policy.sample_normalized(
                policy._to_device(tensors), torch.from_numpy(noise).to(policy.device), scale, steps
            )
            return policy.action_norm.unnormalize(out)

    def plan(obs: Mapping[str, np.ndarray], noise: np.ndarray) -> np.ndarray:
        if best_of_n <= 1:
            return chunks(obs, noise).cpu().numpy()
        n = noise.shape[0]
        extra = rng.standard_normal((best_of_n - 1, *noise.shape), dtype=np.float32)
        extra *= np.float32(noise_temperature)
        noises = np.concatenate([noise[None], extra]).reshape(-1, *noise.shape[1:])
        stacked = best_of_n_candidates(policy, obs, best_of_n)
        candidates = chunks(stacked, noises).cpu().numpy().reshape(best_of_n, n, *noise.shape[1:])
        pick = rank_candidates(policy, stacked, best_of_n)
        return candidates[pick, np.arange(n)]

    return plan


def check_best_of_n(policy: VLAPolicy) -> None:
    """A ValueError unless best-of-N can rank candidates: the value heads read the prefix
    (observation and conditions), not the chunk, so candidates must differ in a condition
    they see: the behaviour token."""
    if policy.value_heads is None:
        raise ValueError(
            "best_of_n > 1 ranks candidates with the value heads; this VLA has none "
            "(model.value_heads=false)"
        )
    if "token" not in policy.prefix.conditions:
        raise ValueError(
            "best_of_n > 1 needs behaviour tokens (model.n_tokens > 0): the value heads "
            "read the observation, not the chunk, so candidates that differ only in noise "
            "all score the same"
        )


def best_of_n_candidates(
    policy: VLAPolicy, obs: Mapping[str, np.ndarray], n_candidates: int
) -> dict[str, np.ndarray]:
    """`obs` of n envs repeated `n_candidates` times (candidate-major, N * n rows), the
    behaviour token of candidate j set to j mod n_tokens."""
    n = int(np.asarray(obs[policy.inputs.obs_keys[0]]).shape[0])
    stacked = {k: np.concatenate([np.asarray(v)] * n_candidates) for k, v in obs.items()}
    tokens = np.repeat(np.arange(n_candidates) % policy.cfg.n_tokens, n).astype(np.int64)
    stacked["token"] = tokens
    return stacked


def rank_candidates(
    policy: VLAPolicy, stacked: Mapping[str, np.ndarray], n_candidates: int
) -> np.ndarray:
    """(n,) index of each env's best candidate in `stacked` (candidate-major rows): the
    highest predicted success, then the highest progress."""
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in stacked.items()}
    with torch.inference_mode():
        values = policy.predict_values(tensors)
    success = values["success"].float().cpu().numpy().reshape(n_candidates, -1)
    progress = values["progress"].float().cpu().numpy().reshape(n_candidates, -1)
    # lexsort: the last key is primary; negated so the largest sorts first
    order = np.lexsort((-progress, -success), axis=0)
    return order[0]
