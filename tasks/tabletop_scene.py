"""The tabletop scene of the manipulation family: the arm on its table (robots/assets/arm/
tabletop.xml, with its front and wrist cameras) plus cubes, bowls, a wall and a goal marker
added with MjSpec, so each task compiles only the objects it uses.

Cubes are free bodies that collide with the table, the robot, the wall, the bowls and each
other. Bowls, the wall and the goal marker are mocap bodies: static in the physics, placed
per env by writing `mocap_pos` at reset. The goal marker is drawn but collides with nothing.
Colours are not physics: each task draws them per episode and hands them to the renderer.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from unilab.robots import get_robot
from unilab.robots.spec import ASSETS

TABLETOP_XML = ASSETS / "arm" / "tabletop.xml"
TIMESTEP = 0.005
"""Physics step (s) of the tabletop scenes: 10 substeps per 0.05 s control step. The arm's
own scene uses 0.002; at 0.005 the experts' grasps, stacks and pushes succeed as often
and a control step costs 0.42 instead of 1.2 ms of CPU (3 cubes, docs/decisions/0032)."""
CUBE_HALF = 0.025
"""Cube half size (m): 5 cm cubes, fitting the 8 cm open gripper with 1.5 cm to spare."""
CUBE_MASS = 0.06
BOWL_INNER_RADIUS = 0.065
BOWL_WALL_HEIGHT = 0.035
BOWL_WALL_THICKNESS = 0.01
BOWL_SEGMENTS = 12
WALL_HALF = (0.015, 0.12, 0.07)
"""Obstacle wall half sizes (m): 3 cm thick, 24 cm wide across the path, 14 cm tall (a
carried cube clears it only well above the expert's carry height; the forearm clears it)."""
GOAL_RADIUS = 0.045
FINGER_PADS = ("left_pad", "right_pad")
PARK_Y = 2.0
"""Where unused mocap bodies wait (m): off the table, out of every camera."""

# Collision bits (see robots/assets/arm/arm.xml): scenery 1/0, robot 4/3. Cubes collide
# with scenery, robot and each other: contype 2, conaffinity 1 | 2 | 4.
_CUBE_CONTYPE, _CUBE_CONAFFINITY = 2, 7
_SCENERY_CONTYPE, _SCENERY_CONAFFINITY = 1, 0

# Intprm of a contact sensor: report "found", net force over at most one contact.
_CONTACT_FOUND = 1 << int(mujoco.mjtConDataField.mjCONDATA_FOUND)
_CONTACT_NETFORCE = 3

COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.12, 0.12),
    "green": (0.15, 0.65, 0.2),
    "blue": (0.15, 0.3, 0.9),
    "yellow": (0.95, 0.85, 0.1),
    "purple": (0.55, 0.2, 0.75),
    "orange": (1.0, 0.5, 0.05),
    "cyan": (0.1, 0.8, 0.85),
    "pink": (1.0, 0.55, 0.75),
}
"""Named object colours (RGB); instructions name them, so they must look distinct."""
COLOUR_NAMES = tuple(COLOURS)
COLOUR_RGB = np.array([COLOURS[n] for n in COLOUR_NAMES], dtype=np.float64)


@dataclass(frozen=True)
class SceneLayout:
    num_cubes: int = 3
    num_bowls: int = 0
    wall: bool = False
    goal_marker: bool = False


def cube_name(i: int) -> str:
    return f"cube{i}"


def bowl_name(i: int) -> str:
    return f"bowl{i}"


def touch_sensor_name(pad: str, cube: int) -> str:
    return f"touch_{pad}_{cube_name(cube)}"


def build_scene(layout: SceneLayout) -> mujoco.MjModel:
    """Compile the tabletop with layout's objects and a "home" keyframe (arm at its ready
    pose, gripper open, cubes in a row at the back of the table, mocap bodies parked)."""
    if layout.num_cubes < 1:
        raise ValueError(f"a tabletop scene needs at least one cube, got {layout.num_cubes}")
    spec = mujoco.MjSpec.from_file(str(TABLETOP_XML))
    spec.option.timestep = TIMESTEP
    world = spec.worldbody
    box = mujoco.mjtGeom.mjGEOM_BOX
    for i in range(layout.num_cubes):
        body = world.add_body(name=cube_name(i), pos=[0.3, 0.0, CUBE_HALF])
        body.add_freejoint(name=cube_name(i))
        body.add_geom(
            name=cube_name(i),
            type=box,
            size=[CUBE_HALF] * 3,
            mass=CUBE_MASS,
            contype=_CUBE_CONTYPE,
            conaffinity=_CUBE_CONAFFINITY,
            condim=4,
            friction=[1.0, 0.005, 0.0001],
            rgba=[0.5, 0.5, 0.5, 1.0],
        )
    for b in range(layout.num_bowls):
        _add_bowl(world, bowl_name(b))
    if layout.wall:
        wall = world.add_body(name="wall", mocap=True, pos=[0.0, PARK_Y, 0.0])
        wall.add_geom(
            name="wall",
            type=box,
            size=list(WALL_HALF),
            pos=[0.0, 0.0, WALL_HALF[2]],
            contype=_SCENERY_CONTYPE,
            conaffinity=_SCENERY_CONAFFINITY,
            rgba=[0.6, 0.6, 0.65, 1.0],
        )
    if layout.goal_marker:
        goal = world.add_body(name="goal", mocap=True, pos=[0.0, -PARK_Y, 0.0])
        goal.add_geom(
            name="goal",
            type=mujoco.mjtGeom.mjGEOM_CYLINDER,
            size=[GOAL_RADIUS, 0.0015, 0.0],
            pos=[0.0, 0.0, 0.0015],
            contype=0,
            conaffinity=0,
            rgba=[0.2, 0.8, 0.2, 1.0],
        )
    for pad in FINGER_PADS:
        for i in range(layout.num_cubes):
            spec.add_sensor(
                name=touch_sensor_name(pad, i),
                type=mujoco.mjtSensor.mjSENS_CONTACT,
                objtype=mujoco.mjtObj.mjOBJ_GEOM,
                objname=pad,
                reftype=mujoco.mjtObj.mjOBJ_GEOM,
                refname=cube_name(i),
                intprm=[_CONTACT_FOUND, _CONTACT_NETFORCE, 1],
            )
    _add_home_key(spec, layout)
    model: mujoco.MjModel = spec.compile()
    return model


def _add_bowl(world: mujoco.MjsBody, name: str) -> None:
    """A shallow bowl of a bottom disc and BOWL_SEGMENTS wall boxes on a circle."""
    bowl = world.add_body(name=name, mocap=True, pos=[0.0, PARK_Y, 0.0])
    kw = {"contype": _SCENERY_CONTYPE, "conaffinity": _SCENERY_CONAFFINITY}
    outer = BOWL_INNER_RADIUS + BOWL_WALL_THICKNESS
    bowl.add_geom(
        name=f"{name}_bottom",
        type=mujoco.mjtGeom.mjGEOM_CYLINDER,
        size=[outer, 0.003, 0.0],
        pos=[0.0, 0.0, 0.003],
        rgba=[0.5, 0.5, 0.5, 1.0],
        **kw,
    )
    r = BOWL_INNER_RADIUS + BOWL_WALL_THICKNESS / 2
    half_len = r * np.tan(np.pi / BOWL_SEGMENTS) + 0.002  # segments overlap at the joints
    for k in range(BOWL_SEGMENTS):
        angle = 2 * np.pi * k / BOWL_SEGMENTS
        bowl.add_geom(
            name=f"{name}_wall{k}",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[BOWL_WALL_THICKNESS / 2, half_len, BOWL_WALL_HEIGHT / 2],
            pos=[r * np.cos(angle), r * np.sin(angle), BOWL_WALL_HEIGHT / 2],
            quat=[np.cos(angle / 2), 0.0, 0.0, np.sin(angle / 2)],
            rgba=[0.5, 0.5, 0.5, 1.0],
            **kw,
        )


def _add_home_key(spec: mujoco.MjSpec, layout: SceneLayout) -> None:
    arm = get_robot("arm")
    qpos = [*arm.default_pose, 0.04, 0.04]
    for i in range(layout.num_cubes):
        qpos += [0.25, 0.3 - 0.08 * i, CUBE_HALF, 1.0, 0.0, 0.0, 0.0]
    nmocap = layout.num_bowls + int(layout.wall) + int(layout.goal_marker)
    mpos = [[0.0, PARK_Y + 0.3 * k, 0.0] for k in range(nmocap)]
    spec.add_key(
        name="home",
        qpos=qpos,
        ctrl=[*arm.default_pose, 0.04],
        mpos=np.asarray(mpos, dtype=np.float64).ravel().tolist() if nmocap else [],
        mquat=[1.0, 0.0, 0.0, 0.0] * nmocap,
    )
