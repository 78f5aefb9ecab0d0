"""Planar arm: two motor-driven links turning about vertical axes (the reacher shape)."""

from __future__ import annotations

from .registry import ROBOTS
from .spec import ASSETS, RobotSpec

PLANAR_ARM = RobotSpec(
    name="planar_arm",
    mjcf=ASSETS / "planar_arm" / "scene.xml",
    joint_names=("shoulder", "elbow"),
    actuator_names=("shoulder_motor", "elbow_motor"),
    default_pose=(0.0, 0.0),
    kp=(0.0, 0.0),
    kd=(0.0, 0.0),
    # ctrl = action in [-1, 1]; the motors' gear (0.05) turns it into at most 0.05 N m.
    action_scale=1.0,
    # The shoulder turns half a turn either way (no full turns: a target straight behind
    # is the farthest reach); the elbow folds to 160 degrees.
    joint_lower=(-3.1416, -2.8),
    joint_upper=(3.1416, 2.8),
    effort_limit=(0.05, 0.05),
    end_effector_site="fingertip",
    bodies={"target": "target"},
    sites={"fingertip": "fingertip"},
    control_mode="force",
    source=(
        "Written for unilab in the shape of the classic reacher benchmark (dm_control, "
        "gymnasium): two 0.12 m links, small motors."
    ),
)

ROBOTS.add(PLANAR_ARM.name, PLANAR_ARM)
