"""MuJoCo scenes as Rerun entities, read back with Rerun's own RRD reader."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest
import rerun as rr
from rerun.chunk import RrdReader

from unilab.robots import get_robot
from unilab.robots.validate import load_model
from unilab.viz.recorder import RolloutRecorder
from unilab.viz.rerun_scene import hfield_grid, log_scene, shown_geoms

EVERY_GEOM = """
<mujoco>
  <asset>
    <hfield name="bumps" nrow="3" ncol="4" size="1.5 1.0 0.4 0.1"
            elevation="0 1 0 1  1 0 1 0  0 0 1 1"/>
    <mesh name="tetra" vertex="0 0 0  1 0 0  0 1 0  0 0 1"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="0 0 0.1"/>
    <geom name="terrain" type="hfield" hfield="bumps" pos="5 0 0"/>
    <body name="base" pos="0 0 1">
      <freejoint/>
      <geom name="box" type="box" size="0.1 0.2 0.3"/>
      <geom name="ball" type="sphere" size="0.1" pos="0.3 0 0"/>
      <geom name="egg" type="ellipsoid" size="0.1 0.2 0.3" pos="0.6 0 0"/>
      <geom name="pill" type="capsule" size="0.05 0.2" pos="0.9 0 0"/>
      <geom name="can" type="cylinder" size="0.05 0.2" pos="1.2 0 0"/>
      <geom name="tet" type="mesh" mesh="tetra" pos="1.5 0 0"/>
      <geom name="hidden" type="box" size="0.1 0.1 0.1" group="3"/>
      <body name="link" pos="0 0 -0.5">
        <joint name="hinge" type="hinge"/>
        <geom name="collision_only" type="capsule" size="0.02 0.1" group="3"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""

ARCHETYPE_OF = {
    "floor": "Boxes3D",
    "terrain": "Mesh3D",
    "box": "Boxes3D",
    "ball": "Ellipsoids3D",
    "egg": "Ellipsoids3D",
    "pill": "Capsules3D",
    "can": "Cylinders3D",
    "tet": "Mesh3D",
    "collision_only": "Capsules3D",
}


def _read(path: Path) -> dict[str, set[str]]:
    """Entity path -> component column names (archetype:field) over all chunks."""
    columns: dict[str, set[str]] = {}
    for chunk in RrdReader(path).stream().to_chunks():
        names = set(chunk.to_record_batch().schema.names)
        columns.setdefault(chunk.entity_path, set()).update(names)
    return columns


def _rows(path: Path, entity: str) -> int:
    return sum(
        c.num_rows
        for c in RrdReader(path).stream().to_chunks()
        if c.entity_path == entity and not c.is_static
    )


def test_every_geom_type_becomes_its_rerun_archetype(tmp_path: Path) -> None:
    model = mujoco.MjModel.from_xml_string(EVERY_GEOM)
    rec = rr.RecordingStream("unilab_test")
    rec.save(str(tmp_path / "scene.rrd"))
    layout = log_scene(rec, model)
    rec.flush()
    rec.disconnect()
    columns = _read(tmp_path / "scene.rrd")
    assert layout.body_paths == ["world/bodies/base", "world/bodies/link"]
    for geom, archetype in ARCHETYPE_OF.items():
        parent = {"floor": "world/static", "terrain": "world/static"}.get(geom)
        parent = parent or (
            "world/bodies/link" if geom == "collision_only" else "world/bodies/base"
        )
        entity = f"/{parent}/{geom}"
        assert entity in columns, entity
        assert any(c.startswith(f"{archetype}:") for c in columns[entity]), (
            entity,
            columns[entity],
        )
        assert "Transform3D:translation" in columns[entity]
    # Group 3 is drawn only where a body has nothing else: `hidden` stays out.
    assert "/world/bodies/base/hidden" not in columns
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in shown_geoms(model)]
    assert "hidden" not in names and "collision_only" in names


def test_hfield_mesh_matches_the_surface_mujoco_collides_with() -> None:
    model = mujoco.MjModel.from_xml_string(EVERY_GEOM)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    verts, tris = hfield_grid(model, 0)
    assert verts.shape == (12, 3) and tris.shape == (2 * 2 * 3, 3) and tris.max() == 11
    assert verts[:, 2].min() == 0.0 and verts[:, 2].max() == pytest.approx(0.4)
    terrain = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "terrain")
    origin = data.geom_xpos[terrain]
    geomid = np.zeros(1, dtype=np.int32)
    for x, y, z in verts:
        # Cast a ray straight down just inside the grid (edges are exact sample points).
        start = origin + np.array([x * 0.999, y * 0.999, 2.0])
        dist = mujoco.mj_ray(model, data, start, np.array([0.0, 0.0, -1.0]), None, 1, -1, geomid)
        assert geomid[0] == terrain
        assert start[2] - dist == pytest.approx(origin[2] + z, abs=2e-3), (x, y)


@pytest.mark.parametrize("robot", ["cartpole", "quadruped", "humanoid", "arm"])
def test_robot_scenes_show_every_moving_body(robot: str, tmp_path: Path) -> None:
    model = load_model(get_robot(robot))
    rec = rr.RecordingStream("unilab_test")
    rec.save(str(tmp_path / "robot.rrd"))
    layout = log_scene(rec, model)
    rec.flush()
    rec.disconnect()
    columns = _read(tmp_path / "robot.rrd")
    with_geoms = {int(b) for b in model.geom_bodyid if b > 0}
    assert set(layout.body_ids) == with_geoms  # nothing the robot is made of goes missing
    assert all(f"/{p}" in columns for p in layout.geom_paths)


def test_recorder_writes_one_row_per_step(tmp_path: Path) -> None:
    model = load_model(get_robot("cartpole"))
    data = mujoco.MjData(model)
    recorder = RolloutRecorder(model, ["slider"], ["upright", "action_rate"], ["target"])
    qpos = []
    for step in range(30):
        data.ctrl[:] = np.sin(0.3 * step)
        mujoco.mj_step(model, data)
        qpos.append(data.qpos.copy())
        recorder.add(
            step, step * 0.02, data.xpos, data.xquat, data.qpos, np.array([0.5]),
            {"upright": 1.0, "action_rate": -0.1}, {"target": np.array([step, -step])},
        )  # fmt: skip
    path = recorder.save(tmp_path / "roll.rrd")
    for entity in (
        "/world/bodies/cart", "/world/bodies/pole", "/joints/slider", "/joints/hinge",
        "/actions/slider", "/reward/total", "/reward/upright", "/state/target/1",
    ):  # fmt: skip
        assert _rows(path, entity) == 30, entity
    hinge = next(
        c for c in RrdReader(path).stream().to_chunks() if c.entity_path == "/joints/hinge"
    )
    values = hinge.to_record_batch().column("Scalars:scalars").to_pylist()
    np.testing.assert_allclose([v[0] for v in values], [q[1] for q in qpos], rtol=1e-6)
