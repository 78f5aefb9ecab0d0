"""The scene camera frames the bodies where the state puts them: a tabletop state copied out
of the batch right after a reset still holds the model's parked positions (wall and goal 2 m
to the sides), and a camera framed on those left the arm a few pixels tall in every video."""

from __future__ import annotations

import mujoco
import numpy as np

from unilab.config import compose
from unilab.tasks.registry import make_task
from unilab.viz.video import SceneCamera


def test_the_first_frame_aims_at_the_reset_scene_not_the_parked_one() -> None:
    cfg = compose(["task=arm_around_obstacle", "task.state_policy=true", "task.cameras=[]"])
    task = make_task(cfg.task, num_envs=1, seed=0, sim_cfg=cfg.sim)
    task.reset()
    data = mujoco.MjData(task.model)
    task.sim.batch.get_data(0, data)  # positions not recomputed: what play hands the camera
    wall = mujoco.mj_name2id(task.model, mujoco.mjtObj.mjOBJ_BODY, "wall")
    parked = np.asarray(data.xpos[wall]).copy()
    with SceneCamera(task.model, 160, 120) as cam:
        frame = cam.render(data)
        camera = cam._camera
        assert isinstance(camera, mujoco.MjvCamera)
        # the arm and the objects on the table span about 1.4 m: framed at 3 radii
        assert 1.0 <= camera.distance < 2.5
        np.testing.assert_allclose(np.asarray(camera.lookat)[:2], [0.15, 0.0], atol=0.15)
    assert frame.shape == (120, 160, 3) and frame.std() > 10
    assert np.linalg.norm(np.asarray(data.xpos[wall]) - parked) > 1.0  # it was parked
    task.close()
