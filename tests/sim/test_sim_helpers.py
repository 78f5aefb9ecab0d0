"""Height scans, pushes, contact sensors and rendering of BatchedSim."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mujoco
import numpy as np
import pytest
from sim_test_models import FREE_XML

from unilab.sim import BatchedSim, add_contact_sensors


def _quat(axis: str, degrees: float) -> np.ndarray:
    half = np.radians(degrees) / 2
    q = np.zeros(4)
    q[0] = np.cos(half)
    q["xyz".index(axis) + 1] = np.sin(half)
    return q


def test_ray_heights_follow_body_pose_and_report_misses(free_model: mujoco.MjModel) -> None:
    m = free_model
    sim = BatchedSim(m, 3, default_keyframe="high")
    box_q = m.joint("box_free").qposadr[0]
    ball_q = m.joint("ball_free").qposadr[0]
    qpos = np.tile(m.key("high").qpos, (3, 1))
    qpos[:, ball_q : ball_q + 3] = [0.0, 0.3, 0.07]  # the ball rests at world (0, 0.3)
    qpos[1, box_q + 3 : box_q + 7] = _quat("z", 90)  # env 1 heads along +y
    qpos[2, box_q + 3 : box_q + 7] = _quat("y", 60)  # env 2 pitched down by 60 degrees
    sim.reset([0, 1, 2], qpos=qpos)
    points = np.array(
        [[0.0, 0.0, 0.0], [0.3, 0.0, 0.0], [0.0, 0.0, -0.5], [7.0, 0.0, 0.0], [0.0, 0.0, -2.0]]
    )
    dist = sim.ray_heights(points, "box", miss_distance=5.0)
    assert dist.shape == (3, 5)
    np.testing.assert_allclose(dist[:, 0], 1.0)  # the box's own geom is ignored: floor at 1 m
    np.testing.assert_allclose(dist[[0, 2], 1], 1.0)  # heading 0 (pitch ignored): floor
    np.testing.assert_allclose(dist[1, 1], 1.0 - 0.14)  # heading +y: the top of the ball
    np.testing.assert_allclose(dist[:, 2], 0.5)
    np.testing.assert_array_equal(dist[:, 3:], 5.0)  # past the floor's edge / below the floor
    tilted = sim.ray_heights(points[1:2], "box", yaw_only=False)
    np.testing.assert_allclose(tilted[2, 0], 1.0 - 0.3 * np.sin(np.radians(60)))
    assert np.isfinite(sim.ray_heights(points, "box")).all()
    # a geom group mask that leaves out every group sees nothing
    np.testing.assert_array_equal(
        sim.ray_heights(points, "box", geomgroup=np.zeros(6, np.uint8)), 10.0
    )


def test_apply_push_kicks_only_chosen_envs_by_exact_velocity(
    free_model: mujoco.MjModel, chain_model: mujoco.MjModel
) -> None:
    m = free_model
    sim = BatchedSim(m, 4, substeps=2, default_keyframe="high")
    before = sim.qvel.copy()
    sim.apply_push([0, 2], [1.5, -0.5, 0.25])
    box = m.joint("box_free").dofadr[0]
    np.testing.assert_array_equal(
        sim.qvel[[0, 2], box : box + 3] - before[[0, 2], box : box + 3],
        np.tile([1.5, -0.5, 0.25], (2, 1)),
    )
    np.testing.assert_array_equal(sim.qvel[[1, 3]], before[[1, 3]])
    spin = np.array([[0, 0, 0, 0, 0, 2.0], [0, 0, 0, 0, 0, -2.0]])
    sim.apply_push([1, 3], spin, joint="ball_free")
    ball = m.joint("ball_free").dofadr[0]
    np.testing.assert_array_equal(sim.qvel[[1, 3], ball + 5], [2.0, -2.0])
    sim.step(np.zeros((4, m.nu)))  # in free flight nothing acts along x
    np.testing.assert_allclose(sim.qvel[[0, 2], box], 1.5, atol=1e-9)
    np.testing.assert_allclose(sim.qvel[[1, 3], box], 0.0, atol=1e-9)
    with pytest.raises(ValueError, match="'j1' is not a free joint"):
        BatchedSim(chain_model, 1).apply_push([0], [1.0, 0, 0], joint="j1")


def test_contact_sensors_report_per_geom_forces() -> None:
    spec = mujoco.MjSpec.from_string(FREE_XML)
    names = add_contact_sensors(spec, ["box_geom", "ball_geom"])
    assert names == ("contact_box_geom", "contact_ball_geom")
    model = spec.compile()
    sim = BatchedSim(model, 2, substeps=10)
    for _ in range(40):
        sim.step(np.zeros((2, model.nu)))
    box, ball = sim.sensor("contact_box_geom"), sim.sensor("contact_ball_geom")
    assert box.shape == (2, 4) and np.all(box[:, 0] > 0) and np.all(ball[:, 0] > 0)
    np.testing.assert_allclose(np.linalg.norm(box[:, 1:], axis=1), 2.0 * 9.81, rtol=0.05)
    np.testing.assert_allclose(np.linalg.norm(ball[:, 1:], axis=1), 0.5 * 9.81, rtol=0.05)
    sim.reset([1], keyframe="high")  # lifted clear of the floor: no contact
    sim.step(np.zeros((2, model.nu)))
    assert box[1, 0] == 0 and np.all(box[1, 1:] == 0) and box[0, 0] > 0
    with pytest.raises(KeyError, match="unknown geoms"):
        add_contact_sensors(mujoco.MjSpec.from_string(FREE_XML), ["foot"])


RENDER_SCRIPT = textwrap.dedent(
    """
    import sys
    import mujoco, numpy as np
    sys.path.insert(0, sys.argv[2])
    from sim_test_models import FREE_XML
    from unilab.sim import BatchedSim
    from unilab.viz.video import render_frames
    sim = BatchedSim(mujoco.MjModel.from_xml_string(FREE_XML), 3, substeps=5)
    for _ in range(5):
        sim.step()
    np.save(sys.argv[1], render_frames(sim, [0, 2], width=96, height=64))
    """
)


def test_render_frames_gives_non_blank_images(tmp_path: Path) -> None:
    # MuJoCo picks its GL backend when first imported: render in a fresh process with EGL.
    out = tmp_path / "frames.npy"
    env = os.environ | {"MUJOCO_GL": "egl"}
    subprocess.run(
        [sys.executable, "-c", RENDER_SCRIPT, str(out), str(Path(__file__).parent)],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )
    frames = np.load(out)
    assert frames.shape == (2, 64, 96, 3) and frames.dtype == np.uint8
    assert all(frame.std() > 5 for frame in frames)  # not one flat colour
