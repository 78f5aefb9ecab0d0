"""Humanoid of Unitree H1 size: floating pelvis, 19 position-servoed joints."""

from __future__ import annotations

from typing import NamedTuple

from .registry import ROBOTS
from .spec import ASSETS, RobotSpec


class _Joint(NamedTuple):
    name: str
    lower: float
    upper: float
    effort: float
    """N m"""
    kp: float
    kd: float
    default: float


# Source: robots/assets/humanoid/humanoid.xml (its header says where each number is from).
def _leg(side: str) -> list[_Joint]:
    return [
        _Joint(f"{side}_hip_yaw", -0.43, 0.43, 200.0, 150.0, 2.0, 0.0),
        _Joint(f"{side}_hip_roll", -0.43, 0.43, 200.0, 150.0, 2.0, 0.0),
        _Joint(f"{side}_hip_pitch", -1.57, 1.57, 200.0, 150.0, 2.0, -0.1),
        _Joint(f"{side}_knee", -0.26, 2.05, 300.0, 200.0, 4.0, 0.3),
        _Joint(f"{side}_ankle", -0.87, 0.52, 40.0, 40.0, 2.0, -0.2),
    ]


def _arm(side: str) -> list[_Joint]:
    # The shoulder roll range is mirrored: positive lifts the left arm outward.
    lo, hi = (-0.34, 3.11) if side == "left" else (-3.11, 0.34)
    return [
        _Joint(f"{side}_shoulder_pitch", -2.87, 2.87, 40.0, 150.0, 2.0, 0.0),
        _Joint(f"{side}_shoulder_roll", lo, hi, 40.0, 150.0, 2.0, 0.0),
        _Joint(f"{side}_shoulder_yaw", -1.3, 1.3, 18.0, 150.0, 2.0, 0.0),
        _Joint(f"{side}_elbow", -1.25, 2.61, 18.0, 100.0, 2.0, 0.3),
    ]


# Policy order = qpos order: left leg, right leg, torso, left arm, right arm.
_JOINTS = [
    *_leg("left"),
    *_leg("right"),
    _Joint("torso", -2.35, 2.35, 200.0, 300.0, 6.0, 0.0),
    *_arm("left"),
    *_arm("right"),
]
_NAMES = tuple(j.name for j in _JOINTS)

HUMANOID = RobotSpec(
    name="humanoid",
    mjcf=ASSETS / "humanoid" / "scene.xml",
    joint_names=_NAMES,
    actuator_names=_NAMES,
    default_pose=tuple(j.default for j in _JOINTS),
    kp=tuple(j.kp for j in _JOINTS),
    kd=tuple(j.kd for j in _JOINTS),
    action_scale=0.25,
    joint_lower=tuple(j.lower for j in _JOINTS),
    joint_upper=tuple(j.upper for j in _JOINTS),
    effort_limit=tuple(j.effort for j in _JOINTS),
    base_body="pelvis",
    sensors={
        "gyro": "imu_gyro",
        "accelerometer": "imu_acc",
        "orientation": "imu_quat",
        "linear_velocity": "imu_vel",
        "touch_left": "left_foot_touch",
        "touch_right": "right_foot_touch",
    },
    feet=("left_foot", "right_foot"),
    sites={
        "imu": "imu",
        "torso_imu": "torso_imu",
        "left_hand": "left_hand",
        "right_hand": "right_hand",
        "left_foot": "left_foot",
        "right_foot": "right_foot",
    },
    source=(
        "Unitree H1 public specifications and link parameters (rounded; ~48.7 kg, legs "
        "0.4 + 0.4 m); PD gains and default pose from Unitree's public H1 RL examples."
    ),
)

ROBOTS.add(HUMANOID.name, HUMANOID)
