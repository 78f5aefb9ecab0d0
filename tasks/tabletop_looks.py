"""Per-episode looks of the tabletop scene, so image policies cannot key on one rendering:
object colours from a palette with noise, light intensity and direction, and a jittered
pose for every camera. Drawn at each reset, saved with the task's state, and handed to the
renderer (nothing is rendered without cameras)."""

from __future__ import annotations

from typing import ClassVar

import mujoco
import numpy as np

from unilab.sim.render import BatchRenderer
from unilab.tasks.tabletop_config import TabletopConfig
from unilab.tasks.tabletop_geometry import quat_from_rotvec, quat_mul
from unilab.tasks.tabletop_scene import COLOUR_NAMES, COLOUR_RGB, SceneLayout, bowl_name


class TabletopLooks:
    """Mixin of TabletopTask: the looks' arrays live on the task (its `state_attrs` save
    them with the simulator state)."""

    # Provided by the task.
    model: mujoco.MjModel
    rng: np.random.Generator
    num_envs: int
    num_cubes: int
    cfg: TabletopConfig
    layout: ClassVar[SceneLayout]
    renderer: BatchRenderer | None
    cube_colour: np.ndarray
    _cube_geom: np.ndarray

    def _init_looks(self) -> None:
        m, n = self.model, self.num_envs
        self.colour_noise = np.zeros((n, m.ngeom, 3))
        self.light_scale = np.ones((n, 2))
        """(n, 2) scale of the main light and of the headlight."""
        self.light_tilt = np.zeros((n, 2))
        self.camera_offset = np.zeros((n, m.ncam, 3))
        self.camera_turn = np.zeros((n, m.ncam, 3))
        self._base_rgba = m.geom_rgba.copy()
        self._base_cam_pos = m.cam_pos.copy()
        self._base_cam_quat = m.cam_quat.copy()
        self._base_light_dir = m.light_dir.copy()
        self._base_light_diffuse = m.light_diffuse.copy()
        self._base_headlight = (
            np.array(m.vis.headlight.ambient, dtype=np.float64),
            np.array(m.vis.headlight.diffuse, dtype=np.float64),
        )
        self._init_colours()

    def _init_colours(self) -> None:
        """Which geoms take which colour role: cubes their own, bowls/goal a free colour."""
        m = self.model
        self._bowl_geoms = [
            np.array(
                [g for g in range(m.ngeom) if m.body(int(m.geom_bodyid[g])).name == bowl_name(b)]
            )
            for b in range(self.layout.num_bowls)
        ]
        self._goal_geom = m.geom("goal").id if self.layout.goal_marker else -1
        self.extra_colour = np.zeros((self.num_envs, self.layout.num_bowls + 1), dtype=np.int64)

    def draw_cube_colours(self, k: int) -> np.ndarray:
        """(k, cubes + bowls + 1) distinct palette indices per env: cubes first, then a
        colour for each bowl and one for the goal marker (bowls may share one)."""
        order = np.argsort(self.rng.random((k, len(COLOUR_NAMES))), axis=1)
        return order

    def _draw_looks(self, ids: np.ndarray) -> None:
        cfg, k, m = self.cfg, len(ids), self.model
        order = self.draw_cube_colours(k)
        self.cube_colour[ids] = order[:, : self.num_cubes]
        extras = order[:, self.num_cubes : self.num_cubes + self.extra_colour.shape[1]]
        self.extra_colour[ids] = extras
        self.colour_noise[ids] = self.rng.uniform(
            -cfg.colour_jitter, cfg.colour_jitter, (k, m.ngeom, 3)
        )
        self.light_scale[ids] = 1.0 + self.rng.uniform(-cfg.light_jitter, cfg.light_jitter, (k, 2))
        self.light_tilt[ids] = self.rng.uniform(
            -cfg.light_direction_jitter, cfg.light_direction_jitter, (k, 2)
        )
        pos_j, ang_j = cfg.camera_position_jitter, cfg.camera_angle_jitter
        self.camera_offset[ids] = self.rng.uniform(-pos_j, pos_j, (k, m.ncam, 3))
        self.camera_turn[ids] = self.rng.uniform(-ang_j, ang_j, (k, m.ncam, 3))

    def _push_visuals(self, ids: np.ndarray) -> None:
        """Hand the drawn looks of envs ids to the renderer (nothing without cameras)."""
        if self.renderer is None:
            return
        k = len(ids)
        rgba = np.tile(self._base_rgba, (k, 1, 1)).astype(np.float64)
        rgba[:, self._cube_geom, :3] = COLOUR_RGB[self.cube_colour[ids]]
        for b, geoms in enumerate(self._bowl_geoms):
            rgba[:, geoms, :3] = COLOUR_RGB[self.extra_colour[ids, b]][:, None] * 0.8
        if self._goal_geom >= 0:
            rgba[:, self._goal_geom, :3] = COLOUR_RGB[self.extra_colour[ids, -1]]
        rgba[:, :, :3] = np.clip(rgba[:, :, :3] + self.colour_noise[ids], 0.0, 1.0)
        tilt = self.light_tilt[ids]
        light_dir = np.tile(self._base_light_dir, (k, 1, 1))
        light_dir[:, 0, :2] += tilt
        light_dir /= np.linalg.norm(light_dir, axis=2, keepdims=True)
        diffuse = self._base_light_diffuse[None] * self.light_scale[ids, 0, None, None]
        cam_pos = self._base_cam_pos[None] + self.camera_offset[ids]
        cam_quat = quat_mul(self._base_cam_quat[None], quat_from_rotvec(self.camera_turn[ids]))
        ambient, head_diffuse = self._base_headlight
        scale = self.light_scale[ids, 1, None]
        self.renderer.set_visuals(
            ids,
            geom_rgba=rgba,
            light_dir=light_dir,
            light_diffuse=diffuse,
            cam_pos=cam_pos,
            cam_quat=cam_quat,
            headlight_ambient=ambient[None] * scale,
            headlight_diffuse=head_diffuse[None] * scale,
        )
