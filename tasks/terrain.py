"""Curriculum terrain: a grid of tiles of rising difficulty, written into one MuJoCo height field.

The grid has `num_levels` rows of tiles along +x (level 0 is nearly flat, the last the
hardest) and one column along +y per entry of `kinds`. Every tile's edge sits near height 0,
so neighbouring tiles meet without walls, and every tile has a flat platform at its centre
where envs spawn. A flat border surrounds the grid so an env that walks off its tile still
has ground under it.

Kinds (difficulty d in [0, 1] grows with the level):
- `rough`: uniform random bumps, amplitude `rough_min + d * (rough_max - rough_min)`;
- `slope_up` / `slope_down`: a pyramid pit / hill, slope `d * max_slope` (walking outward
  from the centre goes up / down);
- `stairs_up` / `stairs_down`: the same pyramids in steps of `step_width`, step height
  `step_min + d * (step_max - step_min)`;
- `obstacles`: random rectangular blocks, up or down, of the stairs' height.

Sample (r, c) of `heights` lies at world (x, y) = (c, r) * resolution (MuJoCo's height
field rows run along y), so world coordinates index the grid directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from unilab.config.errors import ConfigError

KINDS = ("rough", "slope_up", "slope_down", "stairs_up", "stairs_down", "obstacles")


@dataclass
class TerrainConfig:
    kinds: list[str] = field(default_factory=lambda: list(KINDS))
    """One column of tiles per entry; each one of rough, slope_up, slope_down, stairs_up,
    stairs_down, obstacles (an entry may repeat)."""
    num_levels: int = 10
    """Rows of tiles, in order of rising difficulty."""
    tile_size: float = 8.0
    """Edge of one square tile (m)."""
    border: float = 3.0
    """Flat margin around the grid (m)."""
    resolution: float = 0.1
    """Horizontal distance between height samples (m)."""
    platform: float = 1.0
    """Half-width of the flat spawn platform at each tile's centre (m)."""
    rough_min: float = 0.01
    """Bump amplitude of rough tiles at level 0 (m)."""
    rough_max: float = 0.07
    """Bump amplitude of rough tiles at the top level (m)."""
    rough_cell: float = 0.2
    """Width of one random bump (m); a multiple of resolution."""
    max_slope: float = 0.4
    """Slope (rise over run) of slope tiles at the top level."""
    step_width: float = 0.35
    """Tread of a stair step (m)."""
    step_min: float = 0.02
    """Stair / obstacle height at level 0 (m)."""
    step_max: float = 0.14
    """Stair / obstacle height at the top level (m)."""
    num_obstacles: int = 20
    """Blocks per obstacle tile."""
    seed: int = 0
    """Seed of the random tiles; the same in every worker so all envs see one terrain."""

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown or not self.kinds:
            raise ConfigError(
                f"task.terrain.kinds {unknown or '[]'} are not valid; choose from {', '.join(KINDS)}"
            )
        for name in ("tile_size", "resolution", "rough_cell", "step_width"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"task.terrain.{name}={getattr(self, name)} must be positive")
        if self.num_levels < 1:
            raise ConfigError(f"task.terrain.num_levels={self.num_levels} must be at least 1")
        if not 0 <= self.platform < self.tile_size / 2:
            raise ConfigError(
                f"task.terrain.platform={self.platform} must be in [0, tile_size / 2 = "
                f"{self.tile_size / 2})"
            )


class Terrain:
    """The generated height grid plus the tile layout; `add_to_spec` puts it into a model."""

    def __init__(self, cfg: TerrainConfig) -> None:
        self.cfg = cfg
        self.resolution = cfg.resolution
        self.tile_samples = round(cfg.tile_size / cfg.resolution)
        border = round(cfg.border / cfg.resolution)
        self.border_samples = border
        rows = 2 * border + self.tile_samples * len(cfg.kinds) + 1  # y: one tile per kind
        cols = 2 * border + self.tile_samples * cfg.num_levels + 1  # x: one tile per level
        self.heights = np.zeros((rows, cols))
        """(nrow along y, ncol along x) heights in metres."""
        rng = np.random.default_rng(cfg.seed)
        for level in range(cfg.num_levels):
            difficulty = level / max(cfg.num_levels - 1, 1)
            for col, kind in enumerate(cfg.kinds):
                r0 = border + col * self.tile_samples
                c0 = border + level * self.tile_samples
                tile = self._tile(kind, difficulty, rng)
                self.heights[r0 : r0 + self.tile_samples, c0 : c0 + self.tile_samples] = tile

    # -- layout -------------------------------------------------------------------------

    @property
    def num_levels(self) -> int:
        return self.cfg.num_levels

    @property
    def num_kinds(self) -> int:
        return len(self.cfg.kinds)

    def tile_centers(self, levels: np.ndarray, kinds: np.ndarray) -> np.ndarray:
        """(k, 2) world xy of the centres of tiles (levels[i], kinds[i])."""
        half = (self.tile_samples * self.resolution) / 2
        x = (self.border_samples + levels * self.tile_samples) * self.resolution + half
        y = (self.border_samples + kinds * self.tile_samples) * self.resolution + half
        return np.stack([x, y], axis=-1).astype(np.float64)

    def height_at(self, xy: np.ndarray) -> np.ndarray:
        """Bilinear terrain height at world points xy (..., 2); outside the grid, the edge."""
        rows, cols = self.heights.shape
        gx = np.clip(xy[..., 0] / self.resolution, 0.0, cols - 1.0)
        gy = np.clip(xy[..., 1] / self.resolution, 0.0, rows - 1.0)
        c0 = np.minimum(np.floor(gx).astype(np.int64), cols - 2)
        r0 = np.minimum(np.floor(gy).astype(np.int64), rows - 2)
        fx, fy = gx - c0, gy - r0
        h = self.heights
        top = h[r0, c0] * (1 - fx) + h[r0, c0 + 1] * fx
        bottom = h[r0 + 1, c0] * (1 - fx) + h[r0 + 1, c0 + 1] * fx
        result: np.ndarray = top * (1 - fy) + bottom * fy
        return result

    # -- MuJoCo -------------------------------------------------------------------------

    def add_to_spec(
        self, spec: mujoco.MjSpec, name: str = "terrain", friction: float = 1.0
    ) -> None:
        """Add the height field asset and a static geom (group 0, contype 1, conaffinity 0,
        like the robots' floors) placed so that sample (r, c) lies at world (c, r) * resolution."""
        rows, cols = self.heights.shape
        low, high = float(self.heights.min()), float(self.heights.max())
        span = max(high - low, 1e-6)
        half_x = (cols - 1) * self.resolution / 2
        half_y = (rows - 1) * self.resolution / 2
        spec.add_hfield(
            name=name,
            size=[half_x, half_y, span, 1.0],
            nrow=rows,
            ncol=cols,
            userdata=((self.heights - low) / span).ravel().tolist(),
        )
        spec.worldbody.add_geom(
            name=name,
            type=mujoco.mjtGeom.mjGEOM_HFIELD,
            hfieldname=name,
            pos=[half_x, half_y, low],
            contype=1,
            conaffinity=0,
            group=0,
            friction=[friction, 0.005, 0.0001],
            rgba=[0.55, 0.6, 0.55, 1.0],
        )

    # -- tiles --------------------------------------------------------------------------

    def _tile(self, kind: str, difficulty: float, rng: np.random.Generator) -> np.ndarray:
        cfg, n = self.cfg, self.tile_samples
        # Chebyshev distance of each sample from the tile centre, and how far it lies
        # outside the spawn platform towards the edge (0 on the platform).
        coords = np.arange(n) * self.resolution - cfg.tile_size / 2  # as tile_centers places it
        dist = np.maximum(np.abs(coords)[:, None], np.abs(coords)[None, :])
        to_edge = cfg.tile_size / 2 - np.maximum(dist, cfg.platform)  # height scale, 0 at edge
        step = cfg.step_min + difficulty * (cfg.step_max - cfg.step_min)
        on_platform = dist <= cfg.platform
        if kind == "rough":
            amp = cfg.rough_min + difficulty * (cfg.rough_max - cfg.rough_min)
            cell = max(1, round(cfg.rough_cell / self.resolution))
            coarse = rng.uniform(-amp, amp, (-(-n // cell), -(-n // cell)))
            tile = np.kron(coarse, np.ones((cell, cell)))[:n, :n]
            return np.where(on_platform, 0.0, tile)
        if kind in ("slope_up", "slope_down"):
            sign = 1.0 if kind == "slope_down" else -1.0
            return sign * difficulty * cfg.max_slope * to_edge
        if kind in ("stairs_up", "stairs_down"):
            sign = 1.0 if kind == "stairs_down" else -1.0
            return sign * step * np.floor(to_edge / cfg.step_width)
        # obstacles: blocks of random size, raised or sunk by the step height
        tile = np.zeros((n, n))
        for _ in range(cfg.num_obstacles):
            w, h = rng.integers(round(0.3 / self.resolution), round(1.0 / self.resolution) + 1, 2)
            r, c = rng.integers(0, n - 1, 2)
            tile[r : r + h, c : c + w] = step * rng.choice((-1.0, 1.0))
        return np.where(on_platform, 0.0, tile)
