"""Offscreen frames of one env and their mp4 (OpenCV, mp4v).

Headless machines need `MUJOCO_GL=egl` in the environment before mujoco is first imported
(MuJoCo picks its GL backend at import). Floating-base robots are followed by a tracking
camera; fixed-base scenes get MuJoCo's default free camera. Frame size is capped at the
model's offscreen buffer (`<visual><global offwidth offheight>`, 640 × 480 by default).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

import cv2
import mujoco
import numpy as np
import numpy.typing as npt

from unilab.sim.batched_sim import BatchedSim
from unilab.sim.indices import as_env_ids


class RenderUnavailableError(RuntimeError):
    """No OpenGL context for offscreen rendering; the message says how to get one."""


def render_hint() -> str:
    gl = os.environ.get("MUJOCO_GL", "")
    return (
        f"offscreen rendering is unavailable (MUJOCO_GL={gl or 'unset'}). On a headless "
        "Linux machine set MUJOCO_GL=egl before starting and install EGL with Mesa "
        "(Debian/Ubuntu: libegl1 libegl-mesa0 libgl1-mesa-dri libgbm1 libopengl0)"
    )


class SceneCamera:
    """Renders RGB frames of a MjData with one reusable GL context."""

    def __init__(
        self,
        model: mujoco.MjModel,
        width: int = 640,
        height: int = 480,
        track_body: int | None = None,
        camera: str | None = None,
        shadows: bool = False,
    ) -> None:
        width = min(width, int(model.vis.global_.offwidth))
        height = min(height, int(model.vis.global_.offheight))
        self.width, self.height = width, height
        try:
            self._renderer = mujoco.Renderer(model, height=height, width=width)
        except Exception as exc:  # FatalError, ImportError or OSError depending on the backend
            raise RenderUnavailableError(f"{render_hint()}. MuJoCo said: {exc}") from None
        # Shadows and reflections render the scene again per light / mirror: on a software
        # renderer (Mesa llvmpipe, the usual headless case) they make a frame ~4x slower.
        for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
            self._renderer.scene.flags[flag] = int(shadows)
        # Show collision geoms (group 3) where some body has nothing else to show.
        self._option = mujoco.MjvOption()
        group, body = np.asarray(model.geom_group), np.asarray(model.geom_bodyid)
        if set(body[group == 3].tolist()) - set(body[group <= 2].tolist()):
            self._option.geomgroup[3] = 1
        self._camera: mujoco.MjvCamera | int | str
        if camera is not None:
            self._camera = camera
        else:
            cam = mujoco.MjvCamera()
            mujoco.mjv_defaultFreeCamera(model, cam)
            cam.elevation = -20.0
            if track_body is not None and track_body > 0:
                cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
                cam.trackbodyid = track_body
            self._camera = cam
        self._framed = camera is not None

    def _frame(self, data: mujoco.MjData) -> None:
        """Aim at the moving bodies on the first frame: MuJoCo's default free camera frames
        the whole scene, floors included, which leaves small robots a few pixels tall."""
        self._framed = True
        cam = self._camera
        assert isinstance(cam, mujoco.MjvCamera)
        model = data.model
        # The positions of a state copied in (a batch's `get_data` after a reset) may predate
        # it: objects parked off the table until reset would frame a scene metres wide.
        mujoco.mj_kinematics(model, data)
        moving = np.asarray(model.geom_bodyid) > 0
        if not moving.any():
            return
        pos = np.asarray(data.geom_xpos)[moving]
        reach = np.asarray(model.geom_rbound)[moving]
        centre = pos.mean(axis=0)
        radius = float(np.max(np.linalg.norm(pos - centre, axis=1) + reach))
        # A sphere of this radius fills the view at radius / sin(fovy / 2) ≈ 2.6 radius.
        cam.distance = max(1.0, 3.0 * radius)
        if cam.type == mujoco.mjtCamera.mjCAMERA_FREE:
            cam.lookat[:] = centre

    def render(self, data: mujoco.MjData) -> np.ndarray:
        """(height, width, 3) uint8 RGB."""
        if not self._framed:
            self._frame(data)
        self._renderer.update_scene(data, camera=self._camera, scene_option=self._option)
        frame: np.ndarray = self._renderer.render()
        return frame

    def close(self) -> None:
        self._renderer.close()

    def __enter__(self) -> SceneCamera:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Mp4Writer:
    """Appends RGB frames to an mp4 file (mp4v codec, readable by OpenCV and most players)."""

    def __init__(self, path: Path, fps: float, width: int, height: int) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fourcc = cv2.VideoWriter.fourcc(*"mp4v")
        self._writer = cv2.VideoWriter(str(self.path), fourcc, float(fps), (width, height))
        if not self._writer.isOpened():
            raise RuntimeError(f"OpenCV cannot write mp4v video to {self.path}")
        self.size = (width, height)
        self.frames = 0

    def add(self, rgb: np.ndarray) -> None:
        if (rgb.shape[1], rgb.shape[0]) != self.size:
            raise ValueError(f"frame is {rgb.shape[1]}x{rgb.shape[0]}; video is {self.size}")
        self._writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        self.frames += 1

    def close(self) -> Path:
        self._writer.release()
        return self.path


def jpeg(rgb: np.ndarray, quality: int = 85) -> bytes:
    ok, buf = cv2.imencode(
        ".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality]
    )
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG frame")
    return bytes(buf)


def read_video(path: Path) -> np.ndarray:
    """All frames of a video as (n, h, w, 3) uint8 RGB (for checks and tests)."""
    cap = cv2.VideoCapture(str(path))
    frames = []
    try:
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    finally:
        cap.release()
    return np.stack(frames) if frames else np.zeros((0, 0, 0, 3), np.uint8)


def render_frames(
    sim: BatchedSim,
    env_ids: npt.ArrayLike,
    camera: str | None = None,
    width: int = 320,
    height: int = 240,
) -> np.ndarray:
    """(len(env_ids), height, width, 3) uint8 frames of chosen envs of a BatchedSim (for
    image observations and quick looks); opens and closes one GL context per call."""
    ids = as_env_ids(env_ids, sim.num_envs)
    data = mujoco.MjData(sim.model)
    frames = []
    with SceneCamera(sim.model, width=width, height=height, camera=camera) as cam:
        for env in ids:
            # A persistent batch keeps each env's whole MjData: state as of its last call.
            sim.batch.get_data(int(env), data)
            frames.append(cam.render(data))
    return np.stack(frames) if frames else np.zeros((0, height, width, 3), np.uint8)


def beside(scene: np.ndarray, views: dict[str, np.ndarray]) -> np.ndarray:
    """The scene frame (h, w, 3) with the camera `views` to its right: one column of square
    panels, each view scaled to h // len(views) pixels with nearest-neighbour sampling (the
    pixels a policy sees, not a smoothed copy), its name written in its corner."""
    if not views:
        return scene
    h = scene.shape[0]
    side = h // len(views)
    column = np.zeros((h, side, 3), np.uint8)
    for k, (name, view) in enumerate(views.items()):
        panel = cv2.resize(
            np.ascontiguousarray(view), (side, side), interpolation=cv2.INTER_NEAREST
        )
        cv2.putText(panel, name, (4, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 255), 1)
        column[k * side : (k + 1) * side] = panel
    return np.concatenate([scene, column], axis=1)


def beside_width(width: int, height: int, views: int) -> int:
    """Width of a `beside` frame: the scene plus one column of square panels."""
    return width + (height // views if views else 0)
