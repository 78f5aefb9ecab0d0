"""Offscreen frames of single envs of a BatchedSim (for videos and image observations).

Headless machines need MUJOCO_GL=egl in the environment before mujoco is first imported
(the Makefile exports it); MuJoCo picks its GL backend at import time.
"""

from __future__ import annotations

from types import TracebackType

import mujoco
import numpy as np
import numpy.typing as npt

from unilab.sim.batched_sim import BatchedSim
from unilab.sim.indices import as_env_ids, object_id


class FrameRenderer:
    """Reusable renderer: one GL context, frames of any env of one sim."""

    def __init__(self, sim: BatchedSim, width: int = 320, height: int = 240) -> None:
        self._sim = sim
        try:
            self._renderer = mujoco.Renderer(sim.model, height=height, width=width)
        except mujoco.FatalError as err:
            raise RuntimeError(
                "no OpenGL context for offscreen rendering: set MUJOCO_GL=egl (headless) before"
                f" mujoco is first imported. MuJoCo said: {err}"
            ) from err
        self._data = mujoco.MjData(sim.model)

    def render(self, env_id: int, camera: int | str = -1) -> np.ndarray:
        """(height, width, 3) uint8 frame of env_id from camera (-1: the default free camera)."""
        env = int(as_env_ids(env_id, self._sim.num_envs)[0])
        cam = camera if isinstance(camera, int) and camera == -1 else self._camera_id(camera)
        # A persistent batch keeps each env's whole MjData: positions are those of its last call.
        self._sim.batch.get_data(env, self._data)
        self._renderer.update_scene(self._data, camera=cam)
        frame: np.ndarray = self._renderer.render()
        return frame

    def _camera_id(self, camera: int | str) -> int:
        return object_id(self._sim.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)

    def close(self) -> None:
        self._renderer.close()

    def __enter__(self) -> FrameRenderer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def render_frames(
    sim: BatchedSim,
    env_ids: npt.ArrayLike,
    camera: int | str = -1,
    width: int = 320,
    height: int = 240,
) -> np.ndarray:
    """(len(env_ids), height, width, 3) uint8 frames; opens and closes a GL context per call."""
    ids = as_env_ids(env_ids, sim.num_envs)
    with FrameRenderer(sim, width=width, height=height) as renderer:
        frames = [renderer.render(int(i), camera) for i in ids]
    return np.stack(frames) if frames else np.zeros((0, height, width, 3), np.uint8)
