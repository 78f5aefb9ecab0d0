"""The transition fields a worker writes per step into a chunk, and their shapes.

The runtime owns this layout (workers fill it, the learner stages it); an algorithm only
says which optional fields it needs (`Algorithm.chunk_fields`). What each field means:
`unilab.runtime.rollout`.

Observation groups that are not float vectors travel under their own field names
(`ring_field`): camera images `images/<cam>` as uint8 `images_<cam>` (H, W, 3), depth
`depth/<cam>` as float32 `depth_<cam>`, the instruction's token ids as int64
`obs_instruction`. They stay in their dtype through the ring and the learner's staging
buffer, so a learner receives uint8 image tensors and the policy normalizes them on its
own device (4x fewer bytes to copy than float32).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

FieldSpecs = dict[str, tuple[tuple[int, ...], str]]
"""field name -> (shape per step per env, numpy dtype name)."""

POLICY_EXTRA_FIELDS = ("chain", "chain_logp", "token")
"""`ActionChunk.extras` a worker copies into a chunk that has a field of that name: at each
step the value of the chunk that step's action came from (a flow policy's sampled chain
and its per-row log-probabilities, the behaviour token it was conditioned on)."""

_PREFIXES = (("images/", "images_"), ("depth/", "depth_"))


def ring_field(group: str) -> str:
    """The chunk field of an observation group: `policy` -> `obs_policy`, `images/front`
    -> `images_front`, `depth/front` -> `depth_front`, `instruction` -> `obs_instruction`."""
    for prefix, field in _PREFIXES:
        if group.startswith(prefix):
            return field + group.removeprefix(prefix)
    return f"obs_{group}"


def obs_group_of(field: str) -> str | None:
    """The observation group a chunk field carries at step t (None: not an observation;
    `next_obs_*` fields are the observation after the step and are not counted here)."""
    for prefix, name in _PREFIXES:
        if field.startswith(name):
            return prefix + field.removeprefix(name)
    if field.startswith("obs_"):
        return field.removeprefix("obs_")
    return None


def observation_fields(spec: Mapping[str, Any], groups: Iterable[str]) -> FieldSpecs:
    """Chunk fields for observation `groups` of a task's `observation_spec()` (any group:
    float vectors, uint8 images, int64 token ids), named by `ring_field`."""
    fields: FieldSpecs = {}
    for group in groups:
        if group not in spec:
            raise ValueError(
                f"observation group {group!r} is not in the task's observations {sorted(spec)}"
            )
        entry = spec[group]
        fields[ring_field(group)] = (tuple(int(d) for d in entry.shape), str(entry.dtype))
    return fields


def transition_fields(
    obs_dims: dict[str, int],
    action_dim: int,
    next_obs_groups: tuple[str, ...],
    logprob: bool,
    extra_obs: FieldSpecs | None = None,
) -> FieldSpecs:
    """The fields a worker writes for each step; see `unilab.runtime.rollout` for their
    meaning. `extra_obs` adds observation fields beyond the float vectors (from
    `observation_fields`: images, token ids)."""
    fields: FieldSpecs = {f"obs_{g}": ((d,), "float32") for g, d in obs_dims.items()}
    fields.update(extra_obs or {})
    for group in next_obs_groups:
        fields[f"next_obs_{group}"] = ((obs_dims[group],), "float32")
    fields["action"] = ((action_dim,), "float32")
    if logprob:
        fields["logprob"] = ((), "float32")
    fields["reward"] = ((), "float32")
    fields["terminated"] = ((), "float32")
    fields["truncated"] = ((), "float32")
    fields["episode_return"] = ((), "float32")
    fields["episode_length"] = ((), "float32")
    return fields


def info_fields(
    reward_terms: list[str], task_metrics: list[str], reset_bins: int = 1, branching: bool = False
) -> FieldSpecs:
    """Per-step logging fields every chunk carries: each reward term and each task metric,
    in sorted name order (the learner logs their means; algorithms ignore them), and for a
    task with reset bins `episode_bin`: the bin of the episode that ended at step t, -1
    where none ended (the learner's allocation learns from it)."""
    fields: FieldSpecs = {}
    if reset_bins > 1:
        fields["episode_bin"] = ((), "float32")
    if branching:  # group size k where a group forked after step t (unilab.runtime.branching)
        fields["branch_point"] = ((), "float32")
    if reward_terms:
        fields["reward_terms"] = ((len(reward_terms),), "float32")
    if task_metrics:
        fields["task_metrics"] = ((len(task_metrics),), "float32")
    return fields
