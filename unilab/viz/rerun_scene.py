"""A MuJoCo model's visible geometry as static Rerun entities; bodies move by transforms.

Layout (all under `world`, Z up):

- `world/static/<geom>`: geoms of the world body (floors, terrain), static;
- `world/bodies/<body>`: one entity per moving body with visible geoms; its Transform3D
  (world position and orientation, `xpos`/`xquat`) is what changes each step;
- `world/bodies/<body>/<geom>`: each geom, static, with its pose in the body frame.

Geoms map to Rerun archetypes: box → Boxes3D, sphere and ellipsoid → Ellipsoids3D,
capsule → Capsules3D, cylinder → Cylinders3D, mesh → Mesh3D, height field → Mesh3D
(one triangle grid), plane → a thin Boxes3D (infinite planes drawn 20 m wide). SDF geoms
are left out, and so are geoms in groups above `max_group` (MuJoCo hides groups 3-5 by
default, usually collision copies) unless their body has no other geometry to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np
import rerun as rr

WORLD = "world"
INFINITE_PLANE_HALF = 10.0
PLANE_HALF_THICKNESS = 1e-3


@dataclass(frozen=True)
class SceneLayout:
    body_ids: list[int]
    """Moving bodies with at least one logged geom, in model order."""
    body_paths: list[str]
    """Entity path of each of `body_ids`."""
    geom_paths: list[str]
    """Every logged geom's entity path."""


def entity_name(name: str, fallback: str) -> str:
    return rr.escape_entity_path_part(name) if name else fallback


def _geom_name(model: mujoco.MjModel, gid: int) -> str:
    return entity_name(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, gid) or "", f"geom_{gid}")


def _body_name(model: mujoco.MjModel, bid: int) -> str:
    return entity_name(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, bid) or "", f"body_{bid}")


def _rgba(model: mujoco.MjModel, gid: int) -> np.ndarray:
    mat = int(model.geom_matid[gid])
    rgba = model.mat_rgba[mat] if mat >= 0 else model.geom_rgba[gid]
    return np.clip(np.asarray(rgba) * 255.0, 0, 255).astype(np.uint8)


def _xyzw(wxyz: np.ndarray) -> np.ndarray:
    """MuJoCo quaternions are (w, x, y, z); Rerun's are (x, y, z, w)."""
    return np.asarray(wxyz)[..., [1, 2, 3, 0]]


def geom_archetype(model: mujoco.MjModel, gid: int) -> Any | None:
    """The Rerun archetype drawing geom `gid` in its own frame, or None if not drawable."""
    gtype = int(model.geom_type[gid])
    size = np.asarray(model.geom_size[gid], dtype=np.float64)
    color = _rgba(model, gid)
    g = mujoco.mjtGeom
    if gtype == g.mjGEOM_BOX:
        return rr.Boxes3D(half_sizes=[size], colors=[color], fill_mode="solid")
    if gtype == g.mjGEOM_SPHERE:
        return rr.Ellipsoids3D(half_sizes=[[size[0]] * 3], colors=[color], fill_mode="solid")
    if gtype == g.mjGEOM_ELLIPSOID:
        return rr.Ellipsoids3D(half_sizes=[size], colors=[color], fill_mode="solid")
    if gtype == g.mjGEOM_CAPSULE:
        # Rerun capsules run from (0, 0, 0) to (0, 0, length); MuJoCo's are centred.
        return rr.Capsules3D(
            lengths=[2.0 * size[1]],
            radii=[size[0]],
            translations=[[0.0, 0.0, -size[1]]],
            colors=[color],
            fill_mode="solid",
        )
    if gtype == g.mjGEOM_CYLINDER:
        return rr.Cylinders3D(
            lengths=[2.0 * size[1]], radii=[size[0]], colors=[color], fill_mode="solid"
        )
    if gtype == g.mjGEOM_PLANE:
        hx = size[0] if size[0] > 0 else INFINITE_PLANE_HALF
        hy = size[1] if size[1] > 0 else INFINITE_PLANE_HALF
        return rr.Boxes3D(
            half_sizes=[[hx, hy, PLANE_HALF_THICKNESS]],
            centers=[[0.0, 0.0, -PLANE_HALF_THICKNESS]],
            colors=[color],
            fill_mode="solid",
        )
    if gtype == g.mjGEOM_MESH:
        return _mesh(model, int(model.geom_dataid[gid]), color)
    if gtype == g.mjGEOM_HFIELD:
        return _hfield(model, int(model.geom_dataid[gid]), color)
    return None


def _mesh(model: mujoco.MjModel, mid: int, color: np.ndarray) -> rr.Mesh3D:
    v0, nv = int(model.mesh_vertadr[mid]), int(model.mesh_vertnum[mid])
    f0, nf = int(model.mesh_faceadr[mid]), int(model.mesh_facenum[mid])
    return rr.Mesh3D(
        vertex_positions=np.asarray(model.mesh_vert[v0 : v0 + nv], dtype=np.float32),
        triangle_indices=np.asarray(model.mesh_face[f0 : f0 + nf], dtype=np.uint32),
        albedo_factor=color,
    )


def hfield_grid(model: mujoco.MjModel, hid: int) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (nrow * ncol, 3) in the geom frame and triangles of height field `hid`.

    MuJoCo stores heights normalized to [0, 1], row-major with rows along y; the surface
    spans ±size[0] in x, ±size[1] in y and reaches size[2] at height 1.
    """
    nrow, ncol = int(model.hfield_nrow[hid]), int(model.hfield_ncol[hid])
    sx, sy, sz, _ = (float(s) for s in model.hfield_size[hid])
    adr = int(model.hfield_adr[hid])
    heights = np.asarray(model.hfield_data[adr : adr + nrow * ncol]).reshape(nrow, ncol)
    ys, xs = np.meshgrid(np.linspace(-sy, sy, nrow), np.linspace(-sx, sx, ncol), indexing="ij")
    verts = np.stack([xs, ys, heights * sz], axis=-1).reshape(-1, 3).astype(np.float32)
    r, c = np.meshgrid(np.arange(nrow - 1), np.arange(ncol - 1), indexing="ij")
    a = (r * ncol + c).ravel()
    b, d, e = a + 1, a + ncol, a + ncol + 1
    tris = np.concatenate([np.stack([a, b, e], 1), np.stack([a, e, d], 1)]).astype(np.uint32)
    return verts, tris


def _hfield(model: mujoco.MjModel, hid: int, color: np.ndarray) -> rr.Mesh3D:
    verts, tris = hfield_grid(model, hid)
    return rr.Mesh3D(vertex_positions=verts, triangle_indices=tris, albedo_factor=color)


def shown_geoms(model: mujoco.MjModel, max_group: int = 2) -> list[int]:
    """Geoms to draw: those in groups up to `max_group` (MuJoCo's default visibility), plus
    the next group's geoms of bodies that would otherwise show nothing (robots whose
    collision geoms are their only geometry)."""
    group = np.asarray(model.geom_group)
    body = np.asarray(model.geom_bodyid)
    alpha = np.array([_rgba(model, g)[3] for g in range(model.ngeom)])
    visible = (group <= max_group) & (alpha > 0)
    extra = (group == max_group + 1) & (alpha > 0) & ~np.isin(body, body[visible])
    return [int(g) for g in np.flatnonzero(visible | extra)]


def log_scene(
    rec: rr.RecordingStream, model: mujoco.MjModel, max_group: int = 2, root: str = WORLD
) -> SceneLayout:
    """Log every shown geom once under `root`, as static data; returns which bodies need
    transforms."""
    rec.log(root, rr.ViewCoordinates.RIGHT_HAND_Z_UP, static=True)
    body_ids: list[int] = []
    body_paths: list[str] = []
    geom_paths: list[str] = []
    used: set[str] = set()
    for gid in shown_geoms(model, max_group):
        archetype = geom_archetype(model, gid)
        if archetype is None:
            continue
        bid = int(model.geom_bodyid[gid])
        if bid == 0:
            parent = f"{root}/static"
        else:
            parent = f"{root}/bodies/{_body_name(model, bid)}"
            if bid not in body_ids:
                body_ids.append(bid)
                body_paths.append(parent)
        path = f"{parent}/{_geom_name(model, gid)}"
        if path in used:  # two unnamed or equally named geoms
            path = f"{path}_{gid}"
        used.add(path)
        rec.log(
            path,
            rr.Transform3D(
                translation=np.asarray(model.geom_pos[gid]),
                quaternion=rr.Quaternion(xyzw=_xyzw(model.geom_quat[gid])),
            ),
            archetype,
            static=True,
        )
        geom_paths.append(path)
    order = np.argsort(body_ids)
    return SceneLayout([body_ids[i] for i in order], [body_paths[i] for i in order], geom_paths)
