"""Reset-bin allocation: on a synthetic bandit the Thompson variance rule moves the budget to
the bins whose outcomes are still mixed, never below the floor share; posteriors track the
true success rates and forget old evidence; a task with reset bins draws its episodes with
the published probabilities and reports each ended episode's bin."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.runtime.allocation import BinAllocator
from unilab.tasks.base import draw_bins

TRUE_P = np.array([0.0, 0.02, 0.5, 0.6, 0.98, 1.0])
"""Success rate per bin: two hopeless, two mixed, two solved."""


def _simulate(alloc: BinAllocator, iterations: int, episodes: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    published = []
    for _ in range(iterations):
        probs = alloc.draw_probs()
        published.append(probs)
        bins = draw_bins(rng, probs, alloc.num_bins, episodes)
        outcomes = (rng.random(episodes) < TRUE_P[bins]).astype(np.float64)
        alloc.update(bins, outcomes)
    return published


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_thompson_moves_budget_to_mixed_bins_and_keeps_the_floor(seed: int) -> None:
    floor = 0.2
    alloc = BinAllocator(len(TRUE_P), "thompson", decay=0.9, floor=floor, seed=seed)
    published = _simulate(alloc, iterations=40, episodes=120, seed=seed)
    late = np.mean(published[-10:], axis=0)
    # the two mixed bins take most of the budget; uniform would give them 1/3
    assert late[2] + late[3] > 0.6, late
    for probs in published:
        assert probs.sum() == pytest.approx(1.0, abs=1e-6)
        assert (probs >= floor / len(TRUE_P) - 1e-6).all(), probs  # no bin starves
    # the posteriors sit near the truth
    assert np.abs(alloc.mean_success - TRUE_P).max() < 0.15, alloc.mean_success


def test_uniform_keeps_equal_shares_while_its_posteriors_update() -> None:
    alloc = BinAllocator(len(TRUE_P), "uniform", seed=0)
    published = _simulate(alloc, iterations=10, episodes=120, seed=0)
    assert all(np.allclose(p, 1.0 / len(TRUE_P)) for p in published)
    assert alloc.mean_success[5] > 0.8 > 0.2 > alloc.mean_success[0]


def test_decay_forgets_old_outcomes() -> None:
    alloc = BinAllocator(1, decay=0.5)
    alloc.update(np.zeros(100, np.int64), np.zeros(100))
    assert alloc.mean_success[0] < 0.05
    for _ in range(10):  # the policy learned: now every episode succeeds
        alloc.update(np.zeros(10, np.int64), np.ones(10))
    assert alloc.mean_success[0] > 0.85


def test_iterations_without_outcomes_do_not_decay_the_evidence() -> None:
    # Episodes that start together end together: outcomes come in bursts, and the quiet
    # iterations between bursts must not wash the last burst out.
    alloc = BinAllocator(2, decay=0.5)
    alloc.update(np.array([0, 0, 0, 1, 1, 1]), np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]))
    alpha, beta = alloc.alpha.copy(), alloc.beta.copy()
    for _ in range(20):
        alloc.update(np.full(8, -1), np.zeros(8))
    np.testing.assert_array_equal(alloc.alpha, alpha)
    np.testing.assert_array_equal(alloc.beta, beta)


def test_published_shares_average_many_draws_so_one_publish_does_not_swing() -> None:
    # Two bins with identical evidence: a single Thompson draw splits them anywhere between
    # 0 and 1; the mean over 256 draws stays near half and half.
    alloc = BinAllocator(2, "thompson", floor=0.0, seed=3)
    alloc.update(np.repeat([0, 1], 6), np.tile([1.0, 0.0], 6))
    shares = np.array([alloc.draw_probs()[0] for _ in range(50)])
    assert np.all(np.abs(shares - 0.5) < 0.1), shares
    single = BinAllocator(2, "thompson", floor=0.0, draws=1, seed=3)
    single.update(np.repeat([0, 1], 6), np.tile([1.0, 0.0], 6))
    one_draw = np.array([single.draw_probs()[0] for _ in range(50)])
    assert np.abs(one_draw - 0.5).max() > 0.2, one_draw


def test_steps_without_an_ended_episode_are_ignored_and_bad_input_is_refused() -> None:
    alloc = BinAllocator(3)
    stats = alloc.update(np.array([-1, 0, 2, -1]), np.array([1.0, 1.0, 0.0, 1.0]))
    assert stats.episodes.tolist() == [1, 0, 1] and stats.successes.tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match="outside"):
        alloc.update(np.array([3]), np.array([1.0]))
    with pytest.raises(ValueError, match="thompson"):
        BinAllocator(3, "greedy")
    state = alloc.state_dict()
    other = BinAllocator(3)
    other.load_state_dict(state)
    assert np.array_equal(other.alpha, alloc.alpha) and np.array_equal(other.beta, alloc.beta)
    assert np.array_equal(other.draw_probs(), alloc.draw_probs())  # same Thompson stream
    with pytest.raises(ValueError, match="this task has 4"):
        BinAllocator(4).load_state_dict(state)


def test_arm_reach_draws_targets_in_the_allocated_cells() -> None:
    from unilab.tasks.arm_reach import ArmReachConfig
    from unilab.tasks.registry import make_task

    cfg = ArmReachConfig(target_bins=[2, 1, 2], episode_length_s=0.1)
    task = make_task(cfg, num_envs=16, seed=0)
    assert task.num_reset_bins == 4
    task.bin_probs = np.array([0.0, 0.0, 0.0, 1.0], np.float32)
    task.reset()
    assert (task.episode_bin == 3).all()
    low, high = task.bin_box(np.array([3]))
    assert ((task.target >= low) & (task.target <= high)).all()
    # x and z in the upper halves of the box
    assert (task.target[:, 0] >= 0.45).all() and (task.target[:, 2] >= 0.325).all()
    task.bin_probs = None  # uniform: every cell shows up; ended episodes report their bin
    ended: list[int] = []
    for _ in range(4 * task.max_episode_steps):
        before = task.episode_bin.copy()
        out = task.step(np.zeros((16, task.action_dim), np.float32))
        assert out.episode_bin is not None
        done = out.terminated | out.truncated
        assert np.array_equal(out.episode_bin[done], before[done])
        assert (out.episode_bin[~done] == -1).all()
        ended += out.episode_bin[done].tolist()
    assert set(ended) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="target_bins"):
        make_task(ArmReachConfig(target_bins=[2, 0, 1]), num_envs=1)


def test_arm_lift_places_the_cube_in_the_allocated_cells() -> None:
    from unilab.tasks.arm_lift_cube import ArmLiftCubeConfig
    from unilab.tasks.registry import make_task

    cfg = ArmLiftCubeConfig(cube_low=[0.3, -0.2], cube_high=[0.7, 0.2], cube_bins=[4, 1])
    task = make_task(cfg, num_envs=32, seed=0)
    assert task.num_reset_bins == 4
    for b, (x_low, x_high) in enumerate([(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (0.6, 0.7)]):
        task.bin_probs = np.eye(4, dtype=np.float32)[b]
        task.reset()
        x, y = task.cube_pos[:, 0], task.cube_pos[:, 1]
        assert (task.episode_bin == b).all()
        assert (x >= x_low - 1e-6).all() and (x <= x_high + 1e-6).all(), (b, x)
        assert (np.abs(y) <= 0.2 + 1e-6).all() and np.ptp(y) > 0.1  # y spans the whole area
    with pytest.raises(ValueError, match="cube_bins"):
        make_task(ArmLiftCubeConfig(cube_bins=[2, 1, 1]), num_envs=1)


def test_cartpole_starts_each_bin_in_its_band_of_pole_angles() -> None:
    from unilab.tasks.cartpole_balance import CartpoleBalanceConfig
    from unilab.tasks.registry import make_task

    cfg = CartpoleBalanceConfig(init_angle=0.4, init_angle_bins=4)
    task = make_task(cfg, num_envs=64, seed=0)
    assert task.num_reset_bins == 4
    for k in range(4):
        task.bin_probs = np.eye(4, dtype=np.float32)[k]
        task.reset()
        angle = np.abs(task.sim.qpos[:, 1])
        assert (angle >= 0.1 * k).all() and (angle <= 0.1 * (k + 1)).all()
        assert (task.sim.qpos[:, 1] < 0).any() and (task.sim.qpos[:, 1] > 0).any()
    with pytest.raises(ValueError, match="init_angle_bins"):
        make_task(CartpoleBalanceConfig(init_angle_bins=0), num_envs=1)
    with pytest.raises(ValueError, match="max_pole_angle"):
        make_task(CartpoleBalanceConfig(init_angle=0.7), num_envs=1)


def test_cartpole_sparse_balanced_term_pays_only_near_upright() -> None:
    """The sparse reward the allocation benchmark uses: 1 per step (times control_dt) while
    |pole angle| < balance_tolerance, nothing otherwise; off unless weighted."""
    from unilab.tasks.cartpole_balance import CartpoleBalanceConfig
    from unilab.tasks.registry import make_task

    cfg = CartpoleBalanceConfig(
        init_angle=0.4,
        init_angle_bins=2,
        balance_tolerance=0.1,
        reward_weights={"upright": 0.0, "balanced": 1.0},
    )
    task = make_task(cfg, num_envs=64, seed=0)
    task.bin_probs = np.array([0.5, 0.5], np.float32)
    task.reset()
    inside = np.abs(task.sim.qpos[:, 1]) < 0.1
    assert inside.any() and (~inside).any()
    assert np.array_equal(task.reward_balanced(), inside.astype(np.float64))
    step = task.step(np.zeros((64, 1), np.float32))
    now_inside = np.abs(task.sim.qpos[:, 1]) < 0.1
    assert np.allclose(step.reward_terms["balanced"], task.control_dt * now_inside)
    assert "balanced" not in make_task(CartpoleBalanceConfig(), num_envs=1).reward_weights
    with pytest.raises(ValueError, match="balance_tolerance"):
        make_task(CartpoleBalanceConfig(balance_tolerance=0.0), num_envs=1)


def test_cartpole_cart_bands_start_far_and_pay_only_at_home() -> None:
    """The bring-it-home variant: bins are bands of |initial cart position| (crossed with
    the angle bands when both are set); `balanced_at_center` pays only while the cart is
    near the centre with the pole balanced; success then needs the cart home too."""
    from unilab.tasks.cartpole_balance import CartpoleBalanceConfig
    from unilab.tasks.registry import make_task

    cfg = CartpoleBalanceConfig(
        init_cart_pos=1.2,
        init_cart_bins=4,
        init_angle=0.02,
        success_at_center=True,
        reward_weights={"upright": 0.0, "balanced_at_center": 1.0},
    )
    task = make_task(cfg, num_envs=64, seed=0)
    assert task.num_reset_bins == 4
    for k in range(4):
        task.bin_probs = np.eye(4, dtype=np.float32)[k]
        task.reset()
        cart = task.sim.qpos[:, 0]
        assert (np.abs(cart) >= 0.3 * k).all() and (np.abs(cart) <= 0.3 * (k + 1)).all()
        assert (cart < 0).any() and (cart > 0).any()
        home = np.abs(cart) < 0.1
        balanced = np.abs(task.sim.qpos[:, 1]) < 0.05
        assert np.array_equal(task.reward_balanced_at_center(), (home & balanced).astype(float))
        assert np.array_equal(task.task_metrics()["success"], home.astype(np.float32))
    assert not home.any()  # the far band starts with nothing to earn
    crossed = make_task(
        CartpoleBalanceConfig(init_angle=0.4, init_angle_bins=2, init_cart_bins=3), num_envs=8
    )
    assert crossed.num_reset_bins == 6
    crossed.bin_probs = np.eye(6, dtype=np.float32)[5]  # far angle band x far cart band
    crossed.reset()
    assert (np.abs(crossed.sim.qpos[:, 1]) >= 0.2).all()
    assert (np.abs(crossed.sim.qpos[:, 0]) >= 2 * 0.2 / 3).all()
    with pytest.raises(ValueError, match="init_cart_bins"):
        make_task(CartpoleBalanceConfig(init_cart_bins=0), num_envs=1)
    with pytest.raises(ValueError, match="max_cart_pos"):
        make_task(CartpoleBalanceConfig(init_cart_pos=2.5), num_envs=1)


def test_cartpole_swing_up_lets_the_pole_fall_and_scores_only_a_slow_upright_pole() -> None:
    """The swing-up variant: bins reach down to hanging (pi), a fallen pole does not end
    the episode, angles are wrapped (a pole one full turn round is upright again), and
    success needs the pole upright and slow at the last step."""
    from unilab.tasks.cartpole_balance import CartpoleBalanceConfig
    from unilab.tasks.registry import make_task

    cfg = CartpoleBalanceConfig(
        swing_up=True, init_angle=np.pi, init_angle_bins=6, episode_length_s=1.0
    )
    task = make_task(cfg, num_envs=32, seed=0)
    task.bin_probs = np.eye(6, dtype=np.float32)[5]  # the hanging band
    task.reset()
    assert (np.abs(task.sim.qpos[:, 1]) >= 5 * np.pi / 6 - 1e-9).all()
    for _ in range(task.max_episode_steps - 1):  # nothing ends before the time limit
        step = task.step(np.zeros((32, 1), np.float32))
        assert not step.terminated.any()
        assert not step.extras["success"].any()  # a hanging pole is no success
    assert "pole_fell" not in step.reasons
    # one full turn round, upright and still: success; turning fast through the top: not
    state = task.sim.qpos.copy()
    state[:, 1] = 2 * np.pi + 0.01
    task.sim.reset(np.arange(32), qpos=state, qvel=np.zeros((32, 2)))
    assert task.pole_angle() == pytest.approx(0.01)
    assert task.task_metrics()["success"].all()
    assert task.reward_balanced().all()
    task.sim.reset(np.arange(32), qpos=state, qvel=np.tile([0.0, 5.0], (32, 1)))
    assert not task.task_metrics()["success"].any()
    with pytest.raises(ValueError, match="pi"):
        make_task(CartpoleBalanceConfig(swing_up=True, init_angle=3.5), num_envs=1)
    with pytest.raises(ValueError, match="swing_up"):
        make_task(CartpoleBalanceConfig(init_angle=1.0), num_envs=1)
    with pytest.raises(ValueError, match="success_max_pole_speed"):
        make_task(CartpoleBalanceConfig(swing_up=True, success_max_pole_speed=0.0), num_envs=1)


def test_a_task_without_bins_draws_nothing() -> None:
    from unilab.tasks.arm_reach import ArmReachConfig
    from unilab.tasks.registry import make_task

    a = make_task(ArmReachConfig(), num_envs=4, seed=3)
    b = make_task(ArmReachConfig(), num_envs=4, seed=3)
    b.bin_probs = np.array([1.0], np.float32)  # ignored: one bin
    a.reset(), b.reset()
    assert np.array_equal(a.target, b.target) and a.num_reset_bins == 1
    out = a.step(np.zeros((4, a.action_dim), np.float32))
    assert out.episode_bin is None


def test_a_worker_splits_the_published_vector_between_actor_and_task() -> None:
    import torch

    from unilab.runtime.flat_weights import actor_to_flat
    from unilab.runtime.sim_worker import _load
    from unilab.tasks.arm_reach import ArmReachConfig
    from unilab.tasks.registry import make_task

    task = make_task(ArmReachConfig(target_bins=[1, 2, 2]), num_envs=2)
    actor = torch.nn.Linear(3, 2)
    source = torch.nn.Linear(3, 2)
    probs = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    _load(actor, task, np.concatenate([actor_to_flat(source), probs]))
    assert np.array_equal(actor_to_flat(actor), actor_to_flat(source))
    assert task.bin_probs is not None and np.allclose(task.bin_probs, probs)
    task.reset()  # draws with them
    plain = make_task(ArmReachConfig(), num_envs=2)
    _load(actor, plain, actor_to_flat(source))  # no bins: the whole vector is the actor
    assert plain.bin_probs is None
