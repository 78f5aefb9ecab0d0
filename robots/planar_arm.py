"""Planar arm: two links on position servos turning about vertical axes (the reacher shape)."""

from __future__ import annotations

from .registry import ROBOTS
from .spec import ASSETS, RobotSpec

PLANAR_ARM = RobotSpec(
    name="planar_arm",
    mjcf=ASSETS / "planar_arm" / "scene.xml",
    joint_names=("shoulder", "elbow"),
    actuator_names=("shoulder_servo", "elbow_servo"),
    default_pose=(0.0, 0.0),
    kp=(0.5, 0.5),
    kd=(0.05, 0.05),
    # Joint target = action (rad): the task clips actions to the joint ranges.
    action_scale=1.0,
    # The shoulder turns half a turn either way (no full turns: a target straight behind
    # is the farthest reach); the elbow folds to 160 degrees.
    joint_lower=(-3.1416, -2.8),
    joint_upper=(3.1416, 2.8),
    effort_limit=(0.1, 0.1),
    end_effector_site="fingertip",
    bodies={"target": "target"},
    sites={"fingertip": "fingertip"},
    source=(
        "Written for unilab in the shape of the classic reacher benchmark (dm_control, "
        "gymnasium): two 0.12 m links, small position servos."
    ),
)

ROBOTS.add(PLANAR_ARM.name, PLANAR_ARM)
