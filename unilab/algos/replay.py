"""Replay store for off-policy learners: preallocated tensors on the learner device.

Rows are transitions. `add` writes rows circularly (the oldest are overwritten once the
store is full) and `sample` draws rows uniformly, with replacement, from the filled part
only. Nothing here is checkpointed: a resumed run refills the store from fresh experience.

`transition_rows` turns a (T, N, ...) batch from the runtime into rows, optionally with
n-step returns computed inside the batch: a window stops at the first terminated or
truncated step and at the end of the batch, and bootstraps from that step's `next_obs_*`
(the pre-reset observation, so time-outs bootstrap correctly). Because windows never cross
a batch boundary, the learner does not need consecutive batches to come from the same
workers in the same column order (async mode does not guarantee that).
"""

from __future__ import annotations

import torch

RowSpecs = dict[str, tuple[tuple[int, ...], torch.dtype]]
"""field name -> (shape per row, dtype)."""


class ReplayStore:
    """Circular store of `capacity` rows with the fields of `specs`, on `device`."""

    def __init__(self, capacity: int, specs: RowSpecs, device: torch.device) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be at least 1 row, got {capacity}")
        if not specs:
            raise ValueError("replay store needs at least one field")
        self.capacity = int(capacity)
        self.device = device
        self.data: dict[str, torch.Tensor] = {
            name: torch.zeros((self.capacity, *shape), dtype=dtype, device=device)
            for name, (shape, dtype) in specs.items()
        }
        self.pointer = 0
        """Row the next `add` writes first."""
        self.size = 0
        """Rows filled so far (at most `capacity`)."""
        self.total_added = 0
        """Rows ever added, overwritten ones included."""

    def __len__(self) -> int:
        return self.size

    def add(self, rows: dict[str, torch.Tensor]) -> None:
        """Append rows (every field, same leading size B); keeps the newest `capacity` rows."""
        missing = sorted(set(self.data) - set(rows))
        extra = sorted(set(rows) - set(self.data))
        if missing or extra:
            raise ValueError(
                f"replay rows must have exactly the fields {sorted(self.data)}; "
                f"missing {missing}, unexpected {extra}"
            )
        count = {name: t.shape[0] for name, t in rows.items()}
        n = next(iter(count.values()))
        if any(c != n for c in count.values()):
            raise ValueError(f"replay rows disagree on their number: {count}")
        for name, t in rows.items():
            want = self.data[name].shape[1:]
            if t.shape[1:] != want:
                raise ValueError(
                    f"replay field {name!r} has row shape {tuple(t.shape[1:])}; "
                    f"expected {tuple(want)}"
                )
        if n == 0:
            return
        start = 0
        if n > self.capacity:  # only the newest rows survive anyway
            start = n - self.capacity
            self.pointer = (self.pointer + start) % self.capacity
        kept = n - start
        idx = (self.pointer + torch.arange(kept, device=self.device)) % self.capacity
        for name, t in rows.items():
            self.data[name][idx] = t[start:].to(self.device, self.data[name].dtype)
        self.pointer = (self.pointer + kept) % self.capacity
        self.size = min(self.capacity, self.size + kept)
        self.total_added += n

    def sample(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """`batch_size` rows drawn uniformly with replacement from the filled rows."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay store; add rows first")
        idx = torch.randint(0, self.size, (batch_size,), device=self.device, generator=generator)
        return {name: t[idx] for name, t in self.data.items()}


def transition_rows(
    batch: dict[str, torch.Tensor],
    obs_groups: tuple[str, ...],
    gamma: float,
    nstep: int = 1,
) -> dict[str, torch.Tensor]:
    """Flatten a (T, N, ...) batch into rows with n-step returns.

    Rows hold `obs_<g>` and `next_obs_<g>` for each group, `action`, `reward` (the
    discounted sum of up to `nstep` rewards) and `discount` (gamma^k, or 0 where the window
    ended in a termination): the bootstrap target is `reward + discount * Q(next_obs)`.
    """
    if nstep < 1:
        raise ValueError(f"nstep must be at least 1, got {nstep}")
    reward, terminated = batch["reward"], batch["terminated"]
    ended = torch.clamp(terminated + batch["truncated"], max=1.0) > 0
    horizon, num_envs = reward.shape
    steps = torch.arange(horizon, device=reward.device).unsqueeze(1).expand(horizon, num_envs)
    envs = torch.arange(num_envs, device=reward.device).unsqueeze(0).expand(horizon, num_envs)
    ret = torch.zeros_like(reward)
    disc = torch.ones_like(reward)
    last = steps.clone()
    alive = torch.ones_like(ended)
    for k in range(nstep):
        idx = steps + k
        valid = alive & (idx < horizon)
        idx_c = idx.clamp(max=horizon - 1)
        ret = ret + torch.where(valid, disc * reward[idx_c, envs], 0.0)
        disc = torch.where(valid, disc * gamma, disc)
        last = torch.where(valid, idx_c, last)
        alive = valid & ~ended[idx_c, envs]
    discount = disc * (1.0 - terminated[last, envs])
    rows: dict[str, torch.Tensor] = {}
    for group in obs_groups:
        obs = batch[f"obs_{group}"]
        rows[f"obs_{group}"] = obs.reshape(horizon * num_envs, *obs.shape[2:])
        nxt = batch[f"next_obs_{group}"][last, envs]
        rows[f"next_obs_{group}"] = nxt.reshape(horizon * num_envs, *nxt.shape[2:])
    action = batch["action"]
    rows["action"] = action.reshape(horizon * num_envs, *action.shape[2:])
    rows["reward"] = ret.reshape(-1)
    rows["discount"] = discount.reshape(-1)
    return rows


def row_specs(obs_dims: dict[str, int], obs_groups: tuple[str, ...], action_dim: int) -> RowSpecs:
    """The fields `transition_rows` produces, for `ReplayStore`."""
    specs: RowSpecs = {}
    for group in obs_groups:
        specs[f"obs_{group}"] = ((obs_dims[group],), torch.float32)
        specs[f"next_obs_{group}"] = ((obs_dims[group],), torch.float32)
    specs["action"] = ((action_dim,), torch.float32)
    specs["reward"] = ((), torch.float32)
    specs["discount"] = ((), torch.float32)
    return specs
