"""Expert takeovers (HIL in simulation): the scripted expert drives each episode from a given
step on; the executed actions, the intervention mask and the recorded store say so, and an
episode the expert rescued is stored as a policy failure."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from unilab.config import compose
from unilab.data.play_recorder import PlayRecorder
from unilab.data.store import EpisodeStore
from unilab.runtime.expert_policy import ExpertPolicy
from unilab.runtime.policy import ActionChunk, Policy
from unilab.runtime.rollout import RolloutResult, StepInfo, rollout
from unilab.runtime.takeover import ExpertTakeover
from unilab.tasks.base import Task
from unilab.tasks.experts import make_expert
from unilab.tasks.experts.base import MISSED_GRASP_STEPS, PickPlaceExpert
from unilab.tasks.registry import make_task
from unilab.tasks.tabletop import TabletopTask

OVERRIDES = ["task=arm_move_side", "task.state_policy=true", "task.cameras=[]"]
ENVS = 3


class HoldStill:
    """A numpy Policy that always commands zero motion with the gripper open (or closed)."""

    obs_groups = ("policy",)
    action_dim = 5
    action_horizon = 1

    def __init__(self, grip: float = 1.0) -> None:
        self.grip = grip

    def act(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> ActionChunk:
        actions = np.zeros((len(obs["policy"]), 1, 5), np.float32)
        actions[..., 4] = self.grip
        return ActionChunk(actions, None)

    def act_inference(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.act(obs).actions


def seeded_task() -> TabletopTask:
    cfg = compose(OVERRIDES)
    task = make_task(cfg.task, num_envs=ENVS, seed=0, sim_cfg=cfg.sim)
    assert isinstance(task, TabletopTask)
    seeds = iter(range(100, 10_000))
    task.episode_seeder = lambda ids: np.array([next(seeds) for _ in ids], np.int64)
    return task


def steps_of(
    task: Task, policy: Policy[np.ndarray], takeover: ExpertTakeover | None = None, steps: int = 40
) -> tuple[RolloutResult, list[StepInfo]]:
    seen: list[StepInfo] = []
    result = rollout(task, policy, steps=steps, on_step=seen.append, takeover=takeover)
    return result, seen


def test_a_takeover_from_the_first_step_replays_the_expert_exactly() -> None:
    reference = seeded_task()
    _, expert_steps = steps_of(reference, ExpertPolicy(make_expert(reference, seed=0)))
    task = seeded_task()
    takeover = ExpertTakeover(make_expert(task, seed=0), after_steps=0)
    _, taken_steps = steps_of(task, HoldStill(), takeover)
    for ours, theirs in zip(taken_steps, expert_steps, strict=True):
        assert ours.intervention is not None and ours.intervention.all()
        np.testing.assert_array_equal(ours.actions, theirs.actions)
    reference.close()
    task.close()


def test_the_policy_acts_until_the_takeover_step_then_the_expert() -> None:
    task = seeded_task()
    takeover = ExpertTakeover(make_expert(task, seed=0), after_steps=10)
    result, seen = steps_of(task, HoldStill(), takeover, steps=task.max_episode_steps + 5)
    for info in seen[:10]:
        assert info.intervention is not None and not info.intervention.any()
        np.testing.assert_array_equal(info.actions[:, :4], 0.0)
    assert all(info.intervention is not None and info.intervention.all() for info in seen[10:20])
    # the expert moves the arm where the policy held it still
    assert np.abs(np.stack([i.actions[:, :3] for i in seen[10:20]])).max() > 0.1
    # every episode that ended was driven by the expert at the end: marked as intervened;
    # a new episode starts with the policy again
    assert result.episodes and all(e.intervened for e in result.episodes)
    ended = next(
        k
        for k, info in enumerate(seen)
        if info.result.truncated.any() or info.result.terminated.any()
    )
    env = int(np.flatnonzero(seen[ended].result.terminated | seen[ended].result.truncated)[0])
    after = seen[ended + 1].intervention
    assert after is not None and not after[env]
    task.close()


def test_recorded_takeovers_are_interventions_and_policy_failures(tmp_path: Path) -> None:
    task = seeded_task()
    spec = task.observation_spec()
    store_path = tmp_path / "rollouts.zarr"
    recorder = PlayRecorder(
        store_path,
        {g: (s.shape, s.dtype) for g, s in spec.items()},
        task.action_dim,
        ENVS,
        fps=1.0 / task.control_dt,
        meta={"task": "arm_move_side"},
    )

    def record(info: StepInfo) -> None:
        out = info.result
        recorder.add(
            info.obs,
            info.actions,
            out.reward,
            out.terminated,
            out.truncated,
            success=out.extras.get("success"),
            intervention=info.intervention,
        )

    takeover = ExpertTakeover(make_expert(task, seed=0), after_steps=12)
    result = rollout(task, HoldStill(), episodes=ENVS, on_step=record, takeover=takeover)
    recorder.close()
    task.close()
    rescued = [bool(e.success) for e in result.episodes]
    assert any(rescued), "the expert should finish some of the episodes it took over"
    with EpisodeStore.open(store_path, "r") as st:
        assert len(st) == ENVS
        for i in range(len(st)):
            flags = st.episode(i, ["is_intervention"])["is_intervention"]
            assert not flags[:12].any() and flags[12:].all()
            meta = st.meta(i)
            assert meta.success is False and meta.tags["intervened"] is True
            assert meta.tags["task_success"] in (True, False)
        assert sorted(m.tags["task_success"] for m in st.all_meta()) == sorted(rescued)


def test_a_negative_takeover_step_or_no_trigger_is_refused() -> None:
    task = seeded_task()
    with pytest.raises(ValueError, match="after_steps=-1"):
        ExpertTakeover(make_expert(task, seed=0), after_steps=-1)
    with pytest.raises(ValueError, match="needs a trigger"):
        ExpertTakeover(make_expert(task, seed=0))
    task.close()


@pytest.mark.parametrize("task_name", ["arm_around_obstacle", "arm_pick_place"])
def test_a_missed_grasp_hands_the_episode_to_the_expert(task_name: str) -> None:
    cfg = compose([f"task={task_name}", "task.state_policy=true", "task.cameras=[]"])
    task = make_task(cfg.task, num_envs=ENVS, seed=0, sim_cfg=cfg.sim)
    # fingers closed on nothing, far above the cube: a missed grasp from the first step
    takeover = ExpertTakeover(make_expert(task, seed=0), off_track=True)
    _, seen = steps_of(task, HoldStill(grip=-1.0), takeover, steps=MISSED_GRASP_STEPS + 10)
    for info in seen[: MISSED_GRASP_STEPS - 1]:
        assert info.intervention is not None and not info.intervention.any()
        assert (info.actions[:, 4] < 0).all()
    for info in seen[MISSED_GRASP_STEPS - 1 :]:
        assert info.intervention is not None and info.intervention.all()
    # the expert opens the fingers to grasp again
    assert (seen[-1].actions[:, 4] > 0).all()
    task.close()
    # open fingers, or fingers closed on the cube, are no mistake
    task = make_task(cfg.task, num_envs=ENVS, seed=0, sim_cfg=cfg.sim)
    watching = ExpertTakeover(make_expert(task, seed=0), off_track=True)
    _, seen = steps_of(task, HoldStill(grip=1.0), watching, steps=3 * MISSED_GRASP_STEPS)
    assert not any(info.intervention.any() for info in seen if info.intervention is not None)
    task.reset()
    driver = make_expert(task, seed=0)
    assert isinstance(driver, PickPlaceExpert)
    grasps = np.zeros(ENVS, dtype=bool)
    for _ in range(300):  # the expert grasps: closing onto the cube, then holding it
        actions = driver.act()
        assert not watching.expert.off_track(actions).any()
        task.step(actions)
        grasps |= task.grasped_any(driver.pick)
        if grasps.all():
            break
    assert grasps.all()
    task.close()


def test_closed_fingers_are_no_mistake_where_they_push() -> None:
    task = seeded_task()  # arm_move_side: its push mode moves the cube with closed fingers
    expert = make_expert(task, seed=0)
    assert not expert.judges_mistakes
    with pytest.raises(ValueError, match="cannot tell the policy's mistakes"):
        ExpertTakeover(expert, off_track=True)  # it would never take over
    steps = 3 * MISSED_GRASP_STEPS
    takeover = ExpertTakeover(expert, after_steps=steps, off_track=True)
    _, seen = steps_of(task, HoldStill(grip=-1.0), takeover, steps=steps)
    assert not any(info.intervention.any() for info in seen if info.intervention is not None)
    task.close()


@pytest.mark.parametrize("task_name", ["arm_move_side", "arm_around_obstacle"])
def test_an_expert_taking_over_a_held_cube_carries_it_on(task_name: str) -> None:
    cfg = compose([f"task={task_name}", "task.state_policy=true", "task.cameras=[]"])
    task = make_task(cfg.task, num_envs=ENVS, seed=1, sim_cfg=cfg.sim)
    assert isinstance(task, TabletopTask)
    task.reset()
    first = make_expert(task, seed=0)
    assert isinstance(first, PickPlaceExpert)
    first.reset(modes=len(first.mode_names) - 1)  # carry / right of the wall: a grasp
    envs = np.arange(ENVS)
    for _ in range(150):  # until the first expert holds every cube
        if task.grasped_any(first.pick).all():
            break
        task.step(first.act())
    assert task.grasped_any(first.pick).all()
    # a new expert starting over would open the fingers (phase 0) and drop the cube ...
    fresh = make_expert(task, seed=7)
    fresh.reset(envs)
    assert (fresh.act()[:, 4] > 0).all()
    # ... resumed, it keeps the grip and carries the cube on
    taking_over = make_expert(task, seed=7)
    assert isinstance(taking_over, PickPlaceExpert)
    taking_over.reset(envs)
    taking_over.resume(envs)
    assert (taking_over.phase == taking_over.LIFT).all()
    for _ in range(20):
        actions = taking_over.act()
        assert (actions[:, 4] < 0).all()
        task.step(actions)
    assert task.grasped_any(taking_over.pick).all()
    task.close()


def test_around_the_wall_a_takeover_never_goes_back_to_a_passed_via_point() -> None:
    cfg = compose(["task=arm_around_obstacle", "task.state_policy=true", "task.cameras=[]"])
    task = make_task(cfg.task, num_envs=ENVS, seed=2, sim_cfg=cfg.sim)
    assert isinstance(task, TabletopTask)
    task.reset()
    first = make_expert(task, seed=0)
    assert isinstance(first, PickPlaceExpert)
    first.reset()
    for _ in range(200):  # until every hand is past both via points, on to the goal
        if (first.phase >= first.TRANSPORT).all():
            break
        task.step(first.act())
    for _ in range(3):
        task.step(first.act())
    envs = np.flatnonzero(task.grasped_any(first.pick) & (first.phase == first.TRANSPORT))
    assert envs.size >= 2  # carrying toward the goal, past the wall
    taking_over = make_expert(task, seed=7)
    assert isinstance(taking_over, PickPlaceExpert)
    taking_over.reset(envs)
    taking_over.resume(envs)
    # past the first via point; a via point still to go is ahead of the cube, never behind
    phase = taking_over.phase[envs]
    assert (phase > taking_over.VIA).all() and (phase <= taking_over.TRANSPORT).all()
    ahead = envs[phase < taking_over.TRANSPORT]
    via_x = taking_over.via[ahead, phase[phase < taking_over.TRANSPORT] - taking_over.VIA, 0]
    assert (via_x >= task.cube_pos[ahead, 0, 0]).all()
    task.close()
