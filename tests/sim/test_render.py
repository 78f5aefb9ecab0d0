"""BatchRenderer: tiled images equal a plain mujoco.Renderer's, are deterministic, follow
per-env visuals, survive several passes, and name the valid cameras on a bad name."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from unilab.robots import get_robot
from unilab.sim.batched_sim import BatchedSim
from unilab.sim.render import BatchRenderer, RenderSettings

CAMERAS = ["front", "wrist"]


@pytest.fixture(scope="module")
def arm_model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(get_robot("arm").mjcf))


def posed_sim(model: mujoco.MjModel, num_envs: int, seed: int = 0) -> BatchedSim:
    """Envs with different arm poses and cube positions (written as state, no stepping)."""
    sim = BatchedSim(model, num_envs, default_keyframe="home")
    rng = np.random.default_rng(seed)
    sim.qpos[:, :7] += rng.uniform(-0.4, 0.4, (num_envs, 7))
    cube = model.joint("cube").qposadr[0]
    sim.qpos[:, cube : cube + 2] = rng.uniform([0.4, -0.2], [0.6, 0.2], (num_envs, 2))
    return sim


def reference_frames(sim: BatchedSim, renderer: BatchRenderer, camera: str) -> np.ndarray:
    """The same envs drawn one by one with mujoco.Renderer on the renderer's model."""
    model = renderer._model
    ref = mujoco.Renderer(model, renderer.height, renderer.width)
    for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
        ref.scene.flags[flag] = 0
    ref.scene.flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = 0
    data = mujoco.MjData(model)
    frames = []
    try:
        for env in range(sim.num_envs):
            data.qpos[:] = sim.qpos[env]
            mujoco.mj_forward(model, data)
            ref.update_scene(data, camera=camera, scene_option=renderer._option)
            frames.append(ref.render())
    finally:
        ref.close()
    return np.stack(frames)


def test_tiles_equal_one_renderer_per_env_and_depth_is_metric(arm_model: mujoco.MjModel) -> None:
    sim = posed_sim(arm_model, 5)
    with BatchRenderer(sim, CAMERAS, RenderSettings(width=48, height=40, depth=True)) as r:
        images = r.render()
        for cam in CAMERAS:
            assert images[cam].shape == (5, 40, 48, 3) and images[cam].dtype == np.uint8
            np.testing.assert_array_equal(images[cam], reference_frames(sim, r, cam))
            depth = r.last_depth[cam]
            assert depth.shape == (5, 40, 48) and depth.dtype == np.float32
        # The front camera is 1.05 m out and 0.75 m up: the table lies 0.5-2 m away.
        centre = r.last_depth["front"][:, 20, 24]
        assert ((centre > 0.5) & (centre < 2.0)).all(), centre
        assert np.ptp(images["front"].reshape(5, -1), axis=1).min() > 50  # not blank


def test_same_state_renders_the_same_bytes(arm_model: mujoco.MjModel) -> None:
    sim = posed_sim(arm_model, 4, seed=1)
    with BatchRenderer(sim, CAMERAS) as r, BatchRenderer(sim, CAMERAS) as other:
        first = r.render()
        snap = sim.snapshot()
        sim.step()  # the arm falls toward its targets: different pixels
        moved = r.render()
        assert not np.array_equal(moved["wrist"], first["wrist"])
        sim.restore(snap)
        again = r.render()
        fresh = other.render()
        for cam in CAMERAS:
            assert again[cam].tobytes() == first[cam].tobytes()
            assert fresh[cam].tobytes() == first[cam].tobytes()


def test_subsets_and_several_passes_give_the_same_images(arm_model: mujoco.MjModel) -> None:
    sim = posed_sim(arm_model, 7, seed=2)
    with BatchRenderer(sim, CAMERAS, RenderSettings(width=32, height=32)) as whole:
        full = whole.render()
        part = whole.render([5, 2])
        for cam in CAMERAS:
            np.testing.assert_array_equal(part[cam], full[cam][[5, 2]])
    # A 96 px framebuffer holds 9 tiles of 32 px: 14 tiles take two passes.
    small = RenderSettings(width=32, height=32, max_framebuffer=96)
    with BatchRenderer(sim, CAMERAS, small) as split:
        assert split.tiles_per_pass == 9
        multi = split.render()
        for cam in CAMERAS:
            np.testing.assert_array_equal(multi[cam], full[cam])


def test_per_env_visuals_change_only_their_env(arm_model: mujoco.MjModel) -> None:
    sim = posed_sim(arm_model, 3, seed=3)
    with BatchRenderer(sim, ["front"], RenderSettings(width=32, height=32)) as r:
        before = r.render()["front"]
        rgba = r.visual_defaults("geom_rgba")
        rgba[arm_model.geom("table").id] = [0.1, 0.2, 0.9, 1.0]
        r.set_visuals([1], geom_rgba=rgba[None], headlight_diffuse=[[0.6, 0.6, 0.6]])
        after = r.render()["front"]
        np.testing.assert_array_equal(after[[0, 2]], before[[0, 2]])
        assert after[1, :, :, 2].mean() > before[1, :, :, 2].mean() + 20  # a blue table
        with pytest.raises(ValueError, match="geom_rgba for 1 envs must have shape"):
            r.set_visuals([1], geom_rgba=np.zeros((2, 3)))
        with pytest.raises(ValueError, match="not a visual field"):
            r.set_visuals([1], body_mass=np.zeros(3))


def test_a_missing_camera_names_the_valid_ones(arm_model: mujoco.MjModel) -> None:
    sim = BatchedSim(arm_model, 1, default_keyframe="home")
    with pytest.raises(ValueError, match=r"unknown camera 'top'.*front, wrist"):
        BatchRenderer(sim, ["front", "top"])
    with pytest.raises(ValueError, match="at least one camera"):
        BatchRenderer(sim, [])
    with pytest.raises(TypeError, match="list of camera names"):
        BatchRenderer(sim, "front")
