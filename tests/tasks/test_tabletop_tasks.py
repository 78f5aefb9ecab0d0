"""The tabletop family (every registered TabletopTask; tests/tasks/test_instructions.py
names them): observation groups match the declared spec (shapes, dtypes, finite values),
images and instructions are consistent across auto-resets, cameras change no physics,
terminations and the success metric fire, resume is bit-exact, and bad configs are
named."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.config import compose
from unilab.tasks.base import INSTRUCTION
from unilab.tasks.registry import TASKS as REGISTRY
from unilab.tasks.registry import make_task
from unilab.tasks.tabletop import TabletopTask
from unilab.tasks.tabletop_config import PROPRIO_DIM
from unilab.tasks.tabletop_scene import COLOUR_NAMES

TASKS = [name for name, entry in REGISTRY.items() if issubclass(entry.task_cls, TabletopTask)]


def make(name: str, num_envs: int = 3, seed: int = 0, *overrides: str) -> TabletopTask:
    cfg = compose([f"task={name}", *overrides])
    task = make_task(cfg.task, num_envs=num_envs, seed=seed)
    assert isinstance(task, TabletopTask)
    return task


@pytest.mark.parametrize("name", TASKS)
def test_groups_match_the_spec_through_steps_and_resets(name: str) -> None:
    # 1.5 s episodes: every env times out and auto-resets within the 40 steps.
    task = make(name, 3, 0, "task.image_size=32", "task.episode_length_s=1.5")
    spec = task.observation_spec()
    assert set(spec) == {"policy", "critic", INSTRUCTION, "images/front", "images/wrist"}
    assert spec["images/front"].shape == (32, 32, 3) and spec["images/front"].dtype == "uint8"
    assert spec[INSTRUCTION].dtype == "int64" and spec["policy"].shape == (PROPRIO_DIM,)
    assert task.obs_dims == {"policy": PROPRIO_DIM, "critic": spec["critic"].shape[0]}
    obs = task.reset()
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(40):
        result = task.step(rng.uniform(-1, 1, (3, task.action_dim)).astype(np.float32))
        for group_obs in (result.obs, result.final_obs):
            assert set(group_obs) == set(spec)
            for group, values in group_obs.items():
                assert values.shape == (3, *spec[group].shape), group
                assert values.dtype == np.dtype(spec[group].dtype), group
                if values.dtype == np.float32:
                    assert np.isfinite(values).all(), group
        assert np.isfinite(result.reward).all()
        done = result.terminated | result.truncated
        resets += int(done.sum())
        if done.any():
            # Images of reset envs were re-rendered alone; they match a full render.
            full = task.observe()
            for cam in ("images/front", "images/wrist"):
                np.testing.assert_array_equal(result.obs[cam], full[cam])
            assert not np.array_equal(result.final_obs["critic"][done], result.obs["critic"][done])
        np.testing.assert_array_equal(
            task.instructions.vocab.decode(result.obs[INSTRUCTION]), task.instruction_text()
        )
        obs = result.obs
    assert resets >= 3
    assert obs["images/front"].std() > 10  # lit, not blank
    task.close()


@pytest.mark.parametrize("name", TASKS)
def test_instructions_name_the_cubes_they_are_about(name: str) -> None:
    task = make(name, 6, 1, "task.cameras=[]")
    task.reset()
    for env, text in enumerate(task.instruction_text()):
        assert COLOUR_NAMES[task.cube_colour[env, 0]] in text.split()
        if name == "arm_stack":
            assert COLOUR_NAMES[task.cube_colour[env, 1]] in text.split()
    info = task.episode_info(np.arange(6))
    assert info[0]["instruction"] == task.instruction_text()[0]
    assert len(set(task.cube_colour[0].tolist())) == task.num_cubes  # distinct colours


def test_cameras_change_no_physics() -> None:
    actions = np.random.default_rng(4).uniform(-1, 1, (30, 2, 5)).astype(np.float32)
    runs = []
    for cams in ("task.cameras=[front]", "task.cameras=[]"):
        task = make("arm_stack", 2, 4, cams, "task.image_size=16")
        task.reset()
        runs.append(np.stack([task.step(a).obs["critic"] for a in actions]))
        task.close()
    np.testing.assert_array_equal(runs[0], runs[1])


@pytest.mark.parametrize("name", TASKS)
def test_resume_from_task_state_is_bit_exact(name: str) -> None:
    task = make(name, 2, 5, "task.image_size=16")
    task.reset()
    rng = np.random.default_rng(5)
    for _ in range(5):
        task.step(rng.uniform(-1, 1, (2, 5)).astype(np.float32))
    snap, state = task.sim.snapshot(), task.get_state()
    actions = rng.uniform(-1, 1, (8, 2, 5)).astype(np.float32)
    first = [task.step(a).obs for a in actions]
    task.sim.restore(snap)
    task.set_state(state)
    second = [task.step(a).obs for a in actions]
    for a, b in zip(first, second, strict=True):
        for group in a:
            np.testing.assert_array_equal(a[group], b[group], err_msg=group)
    task.close()


def test_success_and_cube_off_table_terminate() -> None:
    task = make("arm_pick_place", 2, 0, "task.cameras=[]")
    task.reset()
    # Env 0: the named cube dropped into the left bowl; env 1: the cube falls off the table.
    cube = task._cube_qpos[0]
    task.sim.qpos[0, cube : cube + 3] = [*task.bowl_pos[0, 0, :2], 0.03]
    task.sim.qpos[1, cube : cube + 3] = [0.5, 0.8, 0.03]
    hold = np.zeros((2, 5), np.float32)
    hold[:, 4] = 1.0
    ended = {}
    for _ in range(40):
        result = task.step(hold)
        for env in np.flatnonzero(result.terminated):
            ended.setdefault(int(env), {k for k, v in result.reasons.items() if v[env]})
            if env == 0:
                assert result.extras["success"][0] == 1.0
                assert result.extras["in_left_bowl"][0] == 1.0
        if len(ended) == 2:
            break
    assert ended == {0: {"success"}, 1: {"cube_off_table"}}


def test_bad_configs_are_named() -> None:
    with pytest.raises(ValueError, match=r"cameras=\['front', 'top'\].*unknown camera 'top'"):
        make("arm_stack", 1, 0, "task.cameras=[front,top]")
    with pytest.raises(ValueError, match=r"image_size=4 must be in 8\.\.1024"):
        make("arm_stack", 1, 0, "task.image_size=4")
    with pytest.raises(ValueError, match="num_distractors=9 leaves too few colours"):
        make("arm_stack", 1, 0, "task.num_distractors=9")


def test_proprioception_takes_the_named_parts_in_order() -> None:
    full = make("arm_move_side", 2, 4, "task.cameras=[]")
    part = make("arm_move_side", 2, 4, "task.cameras=[]", "task.proprio=[ee_pos,gripper]")
    a, b = full.reset()["policy"], part.reset()["policy"]
    assert part.observation_spec()["policy"].shape == (4,) and b.shape == (2, 4)
    np.testing.assert_array_equal(b[:, :3], a[:, 15:18])  # ee_pos after 7 + 7 + 1
    np.testing.assert_array_equal(b[:, 3], a[:, 14])  # the gripper opening
    for bad in ("[ee_pos,nope]", "[ee_pos,ee_pos]", "[]"):
        with pytest.raises(ValueError, match="proprio="):
            make("arm_move_side", 1, 0, "task.cameras=[]", f"task.proprio={bad}")
