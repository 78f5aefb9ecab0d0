"""7-DoF arm (Franka Panda proportions) with a parallel gripper, on a table with a cube."""

from __future__ import annotations

from .registry import ROBOTS
from .spec import ASSETS, RobotSpec

_JOINTS = tuple(f"joint{i}" for i in range(1, 8))

ARM = RobotSpec(
    name="arm",
    mjcf=ASSETS / "arm" / "scene.xml",
    joint_names=_JOINTS,
    actuator_names=_JOINTS,
    # Franka's "ready" pose: hand pointing down, 0.49 m above the table.
    default_pose=(0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785),
    kp=(600.0, 600.0, 600.0, 600.0, 250.0, 150.0, 50.0),
    kd=(50.0, 50.0, 50.0, 50.0, 30.0, 25.0, 15.0),
    action_scale=0.5,
    joint_lower=(-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973),
    joint_upper=(2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973),
    effort_limit=(87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0),
    keyframe="home",
    sensors={
        "ee_position": "ee_pos",
        "ee_orientation": "ee_quat",
        "object_position": "cube_pos",
        "object_orientation": "cube_quat",
    },
    end_effector_site="ee_site",
    # Target opening per finger in metres: 0 closed, 0.04 open.
    gripper_actuator="gripper",
    bodies={"object": "cube", "target": "target"},
    sites={"object": "cube", "target": "target"},
    source=(
        "Franka Emika Panda: published DH kinematics, joint and torque limits; link masses "
        "from Gaz et al. (RA-L 2019); PD gains from libfranka's joint-impedance example, "
        "with gravity compensation as in Franka's controller."
    ),
)

ROBOTS.add(ARM.name, ARM)
