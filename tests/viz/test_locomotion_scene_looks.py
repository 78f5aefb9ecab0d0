"""Locomotion videos show the motion: a sky above the horizon (no black band) and a checker
floor whose pattern moves under a walking robot, seen by a camera that follows it."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from unilab.tasks.registry import make_task
from unilab.viz.video import SceneCamera


@pytest.mark.parametrize("task_name", ["quadruped_joystick_flat", "humanoid_walk"])
def test_scene_has_a_sky_and_a_checker_floor_and_follows_the_robot(task_name: str) -> None:
    from unilab.config import compose

    cfg = compose([f"task={task_name}"])
    task = make_task(cfg.task, num_envs=1, seed=0)
    task.reset()
    model = task.model
    data = mujoco.MjData(model)
    task.sim.batch.get_data(0, data)
    base = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, task.robot.base_body)
    with SceneCamera(model, 160, 120, track_body=base) as cam:
        frame = cam.render(data).astype(np.float64)
        sky = frame[:10]  # the camera looks down 20 degrees: the top rows are above the horizon
        assert sky.mean() > 60, sky.mean()  # not a black band
        assert sky[..., 2].mean() > sky[..., 0].mean()  # bluish
        floor = frame[-30:]
        assert floor.std() > 8, floor.std()  # a pattern, not one flat grey
        # move the robot 1.3 m forward: the tracking camera follows, the floor pattern shifts
        data.qpos[0] += 1.3
        mujoco.mj_forward(model, data)
        moved = cam.render(data).astype(np.float64)
    assert np.abs(moved[-30:] - floor).mean() > 5
