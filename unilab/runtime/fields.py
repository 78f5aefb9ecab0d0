"""The transition fields a worker writes per step into a chunk, and their shapes.

The runtime owns this layout (workers fill it, the learner stages it); an algorithm only
says which optional fields it needs (`Algorithm.chunk_fields`). What each field means:
`unilab.runtime.rollout`.
"""

from __future__ import annotations

FieldSpecs = dict[str, tuple[tuple[int, ...], str]]
"""field name -> (shape per step per env, numpy dtype name)."""


def transition_fields(
    obs_dims: dict[str, int], action_dim: int, next_obs_groups: tuple[str, ...], logprob: bool
) -> FieldSpecs:
    """The fields a worker writes for each step; see `unilab.runtime.rollout` for their meaning."""
    fields: FieldSpecs = {f"obs_{g}": ((d,), "float32") for g, d in obs_dims.items()}
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


def info_fields(reward_terms: list[str], task_metrics: list[str]) -> FieldSpecs:
    """Per-step logging fields every chunk carries: each reward term and each task metric,
    in sorted name order (the learner logs their means; algorithms ignore them)."""
    fields: FieldSpecs = {}
    if reward_terms:
        fields["reward_terms"] = ((len(reward_terms),), "float32")
    if task_metrics:
        fields["task_metrics"] = ((len(task_metrics),), "float32")
    return fields
