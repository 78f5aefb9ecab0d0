"""Batched camera images of a BatchedSim: every env, every observed camera, one GPU read.

`BatchRenderer` draws each (camera, env) pair as one viewport ("tile") of a single offscreen
framebuffer and reads the whole buffer back with one `mjr_readPixels` per pass, so per-frame
cost is the drawing itself, not a context switch and a read per image. On a machine without
a GPU, EGL runs on Mesa's llvmpipe and every frame costs CPU; on a GPU machine the same code
draws on the GPU's EGL. See docs/decisions/0031-batched-rendering.md for what was measured.

How an env's state reaches the scene: the renderer keeps one private MjModel/MjData pair,
copies the env's qpos (and mocap poses) from the batch's live state rows, and recomputes
kinematics and camera/light poses (`mj_kinematics`, `mj_camlight`, `mj_tendon`) before
`mjv_updateScene`. That is ~4 µs per env against ~20-35 µs for `Batch.get_data`, and it
renders the state as it is now, also after a task wrote qpos or mocap poses since the last
physics call (Batch's derived fields would still show the old state). Models with flexes
or skins take the `get_data` route, whose derived fields include them.

Per-env looks (colours, lights, camera jitter) are render-only: they are written into the
private model before each env is drawn (`set_visuals`) and never touch the physics.
Headless machines need `MUJOCO_GL=egl` before mujoco is first imported.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import mujoco
import numpy as np
import numpy.typing as npt

from unilab.sim.batched_sim import BatchedSim
from unilab.sim.indices import as_env_ids

MAX_FRAMEBUFFER = 4096
"""Largest side (pixels) of the shared offscreen framebuffer; more tiles take more passes."""

VISUAL_FIELDS = (
    "geom_rgba",
    "light_pos",
    "light_dir",
    "light_diffuse",
    "light_ambient",
    "light_specular",
    "cam_pos",
    "cam_quat",
)
"""Model fields a renderer can override per env (`set_visuals`); all are render-only."""

_HEADLIGHT_FIELDS = ("headlight_ambient", "headlight_diffuse")


class RenderUnavailableError(RuntimeError):
    """No OpenGL context for offscreen rendering; the message says how to get one."""


def render_hint() -> str:
    gl = os.environ.get("MUJOCO_GL", "")
    return (
        f"offscreen rendering is unavailable (MUJOCO_GL={gl or 'unset'}). On a headless "
        "Linux machine set MUJOCO_GL=egl before starting and install EGL with Mesa "
        "(Debian/Ubuntu: libegl1 libegl-mesa0 libgl1-mesa-dri libgbm1 libopengl0)"
    )


def camera_names(model: mujoco.MjModel) -> list[str]:
    """Names of the model's cameras, in id order (unnamed cameras skipped)."""
    names = (mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam))
    return [n for n in names if n]


def camera_ids(model: mujoco.MjModel, cameras: Sequence[str]) -> list[int]:
    """Ids of named cameras; a ValueError naming the valid cameras for an unknown one."""
    if isinstance(cameras, str):
        raise TypeError(f"cameras must be a list of camera names, got the string {cameras!r}")
    ids = []
    for name in cameras:
        cid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, str(name))
        if cid < 0:
            valid = camera_names(model)
            raise ValueError(
                f"unknown camera {name!r}; the model's cameras are "
                f"{', '.join(valid) if valid else '(none: add <camera> elements to the MJCF)'}"
            )
        ids.append(int(cid))
    if len(set(ids)) != len(ids):
        raise ValueError(f"cameras {list(cameras)} name a camera twice")
    return ids


@dataclass(frozen=True)
class RenderSettings:
    """How observation images are drawn; the defaults are the cheap ones (see the module doc)."""

    width: int = 64
    height: int = 64
    depth: bool = False
    """Also return metric depth (float32 metres along the camera axis) per camera."""
    shadows: bool = False
    """Shadows and reflections: each costs another scene pass per light (~5x on llvmpipe)."""
    geom_groups: tuple[int, ...] = (0, 1, 2, 3)
    """Geom groups drawn; the arm's hand and fingers exist only as group-3 collision geoms."""
    site_groups: tuple[int, ...] = ()
    """Site groups drawn; none by default (sites are markers for code, not for policies)."""
    tessellation: int = 12
    """Slices of curved shapes (MuJoCo's default 28 buys nothing at 64 px, costs ~20 %)."""
    multisamples: int = 0
    """MSAA samples of the offscreen buffer (MuJoCo's default 4 costs ~30 % on llvmpipe)."""
    max_framebuffer: int = MAX_FRAMEBUFFER
    """Largest side (pixels) of the shared framebuffer; tiles beyond it take more passes."""

    def __post_init__(self) -> None:
        for name in ("width", "height"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= self.max_framebuffer:
                raise ValueError(
                    f"{name} must be an integer in 1..{self.max_framebuffer}, got {value!r}"
                )
        if self.tessellation < 3 or self.multisamples < 0:
            raise ValueError(
                f"tessellation must be >= 3 and multisamples >= 0, got {self.tessellation} and "
                f"{self.multisamples}"
            )


class BatchRenderer:
    """RGB (and optionally depth) images of a BatchedSim's envs from named MJCF cameras.

    `render(env_ids)` returns `{camera: (k, height, width, 3) uint8}` (and, with depth,
    `depth` as `{camera: (k, height, width) float32}` from `last_depth`). Images are fresh
    arrays the caller may keep. The same state and visuals always give the same bytes.
    """

    def __init__(
        self,
        sim: BatchedSim,
        cameras: Sequence[str],
        settings: RenderSettings | None = None,
    ) -> None:
        self.settings = settings or RenderSettings()
        s = self.settings
        self.sim = sim
        self.render_s = 0.0
        """Seconds spent in `render` since construction (where a worker's time goes)."""
        if isinstance(cameras, str):
            raise TypeError(f"cameras must be a list of camera names, got the string {cameras!r}")
        self.cameras = tuple(str(c) for c in cameras)
        if not self.cameras:
            raise ValueError("a BatchRenderer needs at least one camera name")
        self._cam_ids = camera_ids(sim.model, self.cameras)
        self.num_envs = sim.num_envs
        self.width, self.height = s.width, s.height

        # Tiles: camera c of env i is tile c * num_envs + i; as many as fit per pass.
        tiles = len(self.cameras) * self.num_envs
        max_cols = s.max_framebuffer // s.width
        max_rows = s.max_framebuffer // s.height
        cols = min(max_cols, max(1, int(np.ceil(np.sqrt(tiles * s.height / s.width)))))
        rows = min(max_rows, int(np.ceil(tiles / cols)))
        self._cols, self._rows = cols, rows
        self.tiles_per_pass = cols * rows
        self.buffer_size = (cols * s.width, rows * s.height)

        # A private model: the offscreen size, samples and tessellation are read when the
        # MjrContext is made; per-env visuals are written into it before each env is drawn.
        m = copy.deepcopy(sim.model)
        m.vis.global_.offwidth, m.vis.global_.offheight = self.buffer_size
        m.vis.quality.offsamples = s.multisamples
        m.vis.quality.numslices = s.tessellation
        m.vis.quality.numstacks = max(2, s.tessellation // 2)
        m.vis.quality.numquads = 1
        self._model = m
        self._data = mujoco.MjData(m)
        try:
            self._gl = mujoco.GLContext(*self.buffer_size)
            self._gl.make_current()
        except Exception as exc:  # FatalError, ImportError or OSError depending on the backend
            raise RenderUnavailableError(f"{render_hint()}. MuJoCo said: {exc}") from None
        self._ctx: mujoco.MjrContext | None = mujoco.MjrContext(
            m, mujoco.mjtFontScale.mjFONTSCALE_50
        )
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._ctx)
        self._ctx.readDepthMap = mujoco.mjtDepthMap.mjDEPTH_ZEROFAR  # as mujoco.Renderer
        self._scene = mujoco.MjvScene(m, maxgeom=max(64, 2 * m.ngeom + m.nsite))
        for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
            self._scene.flags[flag] = int(s.shadows)
        self._scene.flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = 0
        self._option = mujoco.MjvOption()
        self._option.geomgroup[:] = [
            int(g in s.geom_groups) for g in range(len(self._option.geomgroup))
        ]
        self._option.sitegroup[:] = [
            int(g in s.site_groups) for g in range(len(self._option.sitegroup))
        ]
        self._cams = []
        for cid in self._cam_ids:
            cam = mujoco.MjvCamera()
            cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
            cam.fixedcamid = cid
            self._cams.append(cam)
        self._catmask = int(mujoco.mjtCatBit.mjCAT_ALL)
        self._rgb = np.empty((self.buffer_size[1], self.buffer_size[0], 3), np.uint8)
        self._depth_buf = (
            np.empty((self.buffer_size[1], self.buffer_size[0]), np.float32) if s.depth else None
        )
        self._full = mujoco.MjrRect(0, 0, *self.buffer_size)

        # State sources: live rows of the batch (no copy, no extra work in the step path).
        self._qpos = sim.qpos
        self._mocap_pos = sim.bind("mocap_pos") if m.nmocap else None
        self._mocap_quat = sim.bind("mocap_quat") if m.nmocap else None
        self._use_get_data = bool(m.nflex or m.nskin)
        self._tendons = bool(m.ntendon)
        self._visuals: dict[str, np.ndarray] = {}
        self.last_depth: dict[str, np.ndarray] = {}
        """Depth images of the last render() when settings.depth is on, by camera."""

    # -- per-env looks ------------------------------------------------------------------

    def visual_defaults(self, name: str) -> np.ndarray:
        """The model's value of a visual field (one env's worth), e.g. (ngeom, 4) geom_rgba."""
        if name in _HEADLIGHT_FIELDS:
            light = self.sim.model.vis.headlight
            return np.array(getattr(light, name.removeprefix("headlight_")), dtype=np.float64)
        if name not in VISUAL_FIELDS:
            raise ValueError(
                f"{name!r} is not a visual field; valid: {', '.join(VISUAL_FIELDS + _HEADLIGHT_FIELDS)}"
            )
        return np.array(getattr(self.sim.model, name), dtype=np.float64)

    def set_visuals(self, ids: npt.ArrayLike, **fields: npt.ArrayLike) -> None:
        """Per-env render-only values for the envs in ids, e.g.
        `set_visuals(ids, geom_rgba=(k, ngeom, 4), light_diffuse=(k, nlight, 3))`;
        a field never set keeps the model's value for every env."""
        env_ids = as_env_ids(ids, self.num_envs)
        for name, values in fields.items():
            default = self.visual_defaults(name)
            if name not in self._visuals:
                self._visuals[name] = np.tile(default, (self.num_envs,) + (1,) * default.ndim)
            arr = np.asarray(values, dtype=np.float64)
            want = (env_ids.size, *default.shape)
            if arr.shape != want and arr.shape != default.shape:
                raise ValueError(
                    f"{name} for {env_ids.size} envs must have shape {want}, got {arr.shape}"
                )
            if not np.isfinite(arr).all():
                raise ValueError(f"{name} holds non-finite values")
            self._visuals[name][env_ids] = arr

    def visuals(self) -> dict[str, np.ndarray]:
        """Copies of every per-env visual field set so far (for saving with a task's state)."""
        return {name: values.copy() for name, values in self._visuals.items()}

    def apply_visuals(self, model: mujoco.MjModel, env: int) -> None:
        """Write env `env`'s render-only looks into `model` (a copy of the sim's model that
        another renderer draws, e.g. play's scene camera), so it shows the same colours,
        lights and camera poses as this env's observation images."""
        for name, values in self._visuals.items():
            if name in _HEADLIGHT_FIELDS:
                getattr(model.vis.headlight, name.removeprefix("headlight_"))[:] = values[env]
            else:
                getattr(model, name)[...] = values[env]

    # -- drawing ------------------------------------------------------------------------

    def _load_env(self, env: int) -> None:
        m, d = self._model, self._data
        self.apply_visuals(m, env)
        if self._use_get_data:
            self.sim.batch.get_data(int(env), d)
        else:
            d.qpos[:] = self._qpos[env]
            if self._mocap_pos is not None and self._mocap_quat is not None:
                d.mocap_pos[:] = self._mocap_pos[env]
                d.mocap_quat[:] = self._mocap_quat[env]
        mujoco.mj_kinematics(m, d)
        mujoco.mj_camlight(m, d)
        if self._tendons:
            mujoco.mj_tendon(m, d)

    def render(self, env_ids: npt.ArrayLike | None = None) -> dict[str, np.ndarray]:
        """{camera: (k, H, W, 3) uint8} for the envs in env_ids (None: all), in that order."""
        t0 = time.perf_counter()
        try:
            return self._render(env_ids)
        finally:
            self.render_s += time.perf_counter() - t0

    def _render(self, env_ids: npt.ArrayLike | None) -> dict[str, np.ndarray]:
        ids = np.arange(self.num_envs) if env_ids is None else as_env_ids(env_ids, self.num_envs)
        k, ncam, s = ids.size, len(self.cameras), self.settings
        out = {c: np.empty((k, s.height, s.width, 3), np.uint8) for c in self.cameras}
        depth = (
            {c: np.empty((k, s.height, s.width), np.float32) for c in self.cameras}
            if s.depth
            else {}
        )
        if k == 0:
            self.last_depth = depth
            return out
        assert self._ctx is not None, "render() after close()"
        self._gl.make_current()
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._ctx)
        envs_per_pass = max(1, self.tiles_per_pass // ncam)
        for start in range(0, k, envs_per_pass):
            chunk = ids[start : start + envs_per_pass]
            self._draw(chunk)
            self._read(chunk.size, start, out, depth)
        self.last_depth = depth
        return out

    def _draw(self, env_ids: np.ndarray) -> None:
        m, d, scn, ctx = self._model, self._data, self._scene, self._ctx
        n, w, h, cols = env_ids.size, self.width, self.height, self._cols
        for j, env in enumerate(env_ids):
            self._load_env(int(env))
            for c, cam in enumerate(self._cams):
                tile = c * n + j
                rect = mujoco.MjrRect((tile % cols) * w, (tile // cols) * h, w, h)
                # A full update per camera (~10 µs): mjv_updateCamera alone leaves
                # camera-dependent scene state (light placement, geom order) of the last one.
                mujoco.mjv_updateScene(m, d, self._option, None, cam, self._catmask, scn)
                mujoco.mjr_render(rect, scn, ctx)

    def _read(
        self, n: int, start: int, out: dict[str, np.ndarray], depth: dict[str, np.ndarray]
    ) -> None:
        mujoco.mjr_readPixels(self._rgb, self._depth_buf, self._full, self._ctx)
        ncam, w, h, cols = len(self.cameras), self.width, self.height, self._cols
        used_rows = int(np.ceil(n * ncam / cols))
        # The buffer is bottom-up: tile row r starts r * h rows from the bottom, and each
        # tile's own rows are bottom-up too. Reshape to (rows, h, cols, w) and flip in-tile.
        tiles = self._rgb[: used_rows * h].reshape(used_rows, h, cols, w, 3)
        tiles = tiles[:, ::-1].transpose(0, 2, 1, 3, 4).reshape(used_rows * cols, h, w, 3)
        for c, name in enumerate(self.cameras):
            out[name][start : start + n] = tiles[c * n : (c + 1) * n]
        if self._depth_buf is not None:
            grid = self._depth_buf[: used_rows * h].reshape(used_rows, h, cols, w)
            dtiles = grid[:, ::-1].transpose(0, 2, 1, 3).reshape(used_rows * cols, h, w)
            for c, (name, cid) in enumerate(zip(self.cameras, self._cam_ids, strict=True)):
                depth[name][start : start + n] = self._metric_depth(
                    dtiles[c * n : (c + 1) * n], cid
                )

    def _metric_depth(self, z: np.ndarray, cam_id: int) -> np.ndarray:
        """Depth-buffer values (reversed Z, as MuJoCo draws) to metres along the camera axis."""
        m = self._model
        extent = float(m.stat.extent)
        near = np.float32(m.vis.map.znear * extent)
        far = np.float32(m.vis.map.zfar * extent)
        z64 = z.astype(np.float64)
        if int(m.cam_projection[cam_id]) == int(mujoco.mjtProjection.mjPROJ_ORTHOGRAPHIC):
            return (far - z64 * (far - near)).astype(np.float32)
        c_coef = -(far + near) / (far - near)
        d_coef = -(np.float32(2) * far * near) / (far - near)
        c_coef = np.float32(-0.5) * c_coef - np.float32(0.5)
        d_coef = np.float32(-0.5) * d_coef
        return (d_coef / (z64 + c_coef)).astype(np.float32)

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        if self._ctx is not None:
            self._gl.make_current()
            self._ctx.free()
            self._ctx = None
            self._gl.free()

    def __enter__(self) -> BatchRenderer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # At interpreter shutdown the GL library may be gone already.
        with contextlib.suppress(Exception):
            self.close()
