"""Replay store: circular overwrite, sampling from filled rows only, shapes, n-step rows."""

from __future__ import annotations

import pytest
import torch

from unilab.algos.replay import ReplayStore, row_specs, transition_rows

CPU = torch.device("cpu")


def _store(capacity: int) -> ReplayStore:
    return ReplayStore(capacity, {"x": ((), torch.float32), "obs": ((3,), torch.float32)}, CPU)


def _rows(values: list[float]) -> dict[str, torch.Tensor]:
    x = torch.tensor(values)
    return {"x": x, "obs": x.unsqueeze(1).repeat(1, 3)}


def test_circular_overwrite_keeps_newest_rows_in_write_order() -> None:
    store = _store(5)
    store.add(_rows([0, 1, 2]))
    assert (store.size, store.pointer) == (3, 3)
    store.add(_rows([3, 4, 5, 6]))
    assert (store.size, store.pointer, store.total_added) == (5, 2, 7)
    # Rows 5 and 6 overwrote the two oldest (0, 1) in place.
    assert store.data["x"].tolist() == [5, 6, 2, 3, 4]
    assert store.data["obs"][:, 0].tolist() == [5, 6, 2, 3, 4]


def test_adding_more_rows_than_capacity_keeps_only_the_newest() -> None:
    store = _store(4)
    store.add(_rows([0, 1]))
    store.add(_rows([10, 11, 12, 13, 14, 15]))
    assert store.size == 4
    assert sorted(store.data["x"].tolist()) == [12, 13, 14, 15]
    # The next row overwrites the oldest survivor (12).
    store.add(_rows([16]))
    assert sorted(store.data["x"].tolist()) == [13, 14, 15, 16]


def test_sampling_draws_only_filled_rows_and_all_of_them() -> None:
    store = _store(100)
    store.add(_rows([float(v) for v in range(1, 11)]))
    gen = torch.Generator().manual_seed(0)
    batch = store.sample(2000, generator=gen)
    seen = set(batch["x"].tolist())
    assert seen == {float(v) for v in range(1, 11)}  # never an empty (zero) row
    assert torch.equal(batch["obs"][:, 0], batch["x"])  # fields of one row stay together


def test_sample_shapes_and_dtypes() -> None:
    specs = row_specs({"policy": 5, "critic": 7}, ("policy", "critic"), 2)
    store = ReplayStore(64, specs, CPU)
    rows = {name: torch.randn(10, *shape) for name, (shape, _) in specs.items()}
    store.add(rows)
    batch = store.sample(32)
    assert batch["obs_policy"].shape == (32, 5)
    assert batch["next_obs_critic"].shape == (32, 7)
    assert batch["action"].shape == (32, 2)
    assert batch["reward"].shape == (32,) and batch["discount"].shape == (32,)
    assert all(t.dtype == torch.float32 for t in batch.values())


def test_bad_rows_and_empty_sampling_raise_clear_errors() -> None:
    store = _store(8)
    with pytest.raises(RuntimeError, match="empty replay store"):
        store.sample(4)
    with pytest.raises(ValueError, match="missing \\['obs'\\]"):
        store.add({"x": torch.zeros(2)})
    with pytest.raises(ValueError, match="'obs' has row shape \\(4,\\); expected \\(3,\\)"):
        store.add({"x": torch.zeros(2), "obs": torch.zeros(2, 4)})
    with pytest.raises(ValueError, match="disagree"):
        store.add({"x": torch.zeros(2), "obs": torch.zeros(3, 3)})
    with pytest.raises(ValueError, match="capacity"):
        _store(0)


def _chunk(horizon: int, rewards: list[list[float]]) -> dict[str, torch.Tensor]:
    """(T, N=2) batch whose next observation at step t is 100 * (t + 1) + env."""
    reward = torch.tensor(rewards).T.contiguous()
    t = torch.arange(horizon, dtype=torch.float32).unsqueeze(1)
    env = torch.arange(2, dtype=torch.float32).unsqueeze(0)
    obs = (100 * t + env).unsqueeze(-1)
    return {
        "obs_policy": obs,
        "next_obs_policy": obs + 100,
        "action": torch.zeros(horizon, 2, 1),
        "reward": reward,
        "terminated": torch.zeros(horizon, 2),
        "truncated": torch.zeros(horizon, 2),
    }


def test_one_step_rows_bootstrap_truncations_and_cut_terminations() -> None:
    batch = _chunk(3, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    batch["terminated"][1, 0] = 1.0
    batch["truncated"][0, 1] = 1.0
    rows = transition_rows(batch, ("policy",), gamma=0.9, nstep=1)
    # Row order is (t, env) flattened: t0e0, t0e1, t1e0, t1e1, t2e0, t2e1.
    assert rows["reward"].tolist() == [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    assert rows["discount"].tolist() == pytest.approx([0.9, 0.9, 0.0, 0.9, 0.9, 0.9])
    assert torch.equal(rows["next_obs_policy"], batch["next_obs_policy"].reshape(6, 1))


def test_nstep_windows_stop_at_episode_ends_and_batch_end() -> None:
    gamma = 0.5
    batch = _chunk(4, [[1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 4.0, 8.0]])
    batch["terminated"][1, 0] = 1.0  # env 0 ends at t=1 (no bootstrap)
    batch["truncated"][2, 1] = 1.0  # env 1 times out at t=2 (bootstrap from its final obs)
    rows = transition_rows(batch, ("policy",), gamma=gamma, nstep=3)
    reward = rows["reward"].view(4, 2)
    discount = rows["discount"].view(4, 2)
    nxt = rows["next_obs_policy"].view(4, 2)
    # env 0, t=0: rewards t0, t1 then terminated -> no bootstrap.
    assert reward[0, 0] == pytest.approx(1.0 + gamma * 1.0)
    assert discount[0, 0] == 0.0
    # env 0, t=2: a new episode; window t2, t3 then the batch ends -> bootstrap at t3.
    assert reward[2, 0] == pytest.approx(1.0 + gamma)
    assert discount[2, 0] == pytest.approx(gamma**2)
    assert nxt[2, 0] == 400.0
    # env 1, t=0: full 3-step window t0..t2, ending in a time-out -> bootstrap from t2.
    assert reward[0, 1] == pytest.approx(1.0 + gamma * 2.0 + gamma**2 * 4.0)
    assert discount[0, 1] == pytest.approx(gamma**3)
    assert nxt[0, 1] == 301.0
    # env 1, t=3: the step after the time-out starts a fresh one-step window.
    assert reward[3, 1] == pytest.approx(8.0)
    assert nxt[3, 1] == 401.0


def test_nstep_must_be_positive() -> None:
    with pytest.raises(ValueError, match="nstep"):
        transition_rows(_chunk(2, [[0.0, 0.0], [0.0, 0.0]]), ("policy",), 0.9, nstep=0)
