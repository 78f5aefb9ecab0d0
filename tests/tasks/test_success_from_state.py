"""`Task.success_from_state`: a task's success judged from critic vectors alone (what a world
model's generator checks its success head against) agrees with the simulator's `success` on
states an expert drives through, and refuses vectors of the wrong width."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.config import compose
from unilab.tasks.experts import make_expert
from unilab.tasks.registry import make_task
from unilab.tasks.tabletop import TabletopTask


def test_arm_move_side_rule_matches_the_simulator_along_expert_episodes() -> None:
    task = make_task(compose(["task=arm_move_side", "task.cameras=[]"]).task, num_envs=8, seed=3)
    assert isinstance(task, TabletopTask)
    obs = task.reset()
    expert = make_expert(task, seed=3)
    agree = hits = 0
    for _ in range(260):
        rule = task.success_from_state(obs["critic"])
        assert rule is not None and rule.shape == (8,) and rule.dtype == bool
        free = ~task.touching(0)  # the rule cannot see the hand's contact
        truth = task.success()
        agree += int((rule == truth)[free].sum())
        assert ((rule == truth) | ~free).all()
        result = task.step(expert.act())
        obs = result.obs
        ended = np.flatnonzero(result.terminated | result.truncated)
        if len(ended):  # the states episodes ended in (success ends an episode at once)
            final = task.success_from_state(result.final_obs["critic"][ended])
            assert final is not None
            np.testing.assert_array_equal(final, result.extras["success"][ended] > 0.5)
            hits += int(final.sum())
        expert.reset(ended)
    assert hits >= 4 and agree > 1000  # successes were reached and checked


def test_parts_split_the_privileged_layout_and_bad_widths_are_refused() -> None:
    task = make_task(compose(["task=arm_move_side", "task.cameras=[]"]).task, num_envs=2, seed=0)
    assert isinstance(task, TabletopTask)
    obs = task.reset()
    parts = task.critic_parts(obs["critic"])
    np.testing.assert_allclose(parts["cube_pos"], task.cube_pos, atol=1e-6)
    np.testing.assert_allclose(parts["proprio"], task.proprio(), atol=1e-6)
    assert parts["task_state"].shape == (2, 3)  # the side one-hot
    with pytest.raises(ValueError, match="critic state of shape"):
        task.success_from_state(obs["critic"][:, :-1])


def test_tasks_without_a_rule_say_so() -> None:
    task = make_task(compose(["task=cartpole_balance"]).task, num_envs=1, seed=0)
    assert task.success_from_state(np.zeros((1, 4), np.float32)) is None
