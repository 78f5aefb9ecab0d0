"""Quadruped of Unitree Go1 size: floating trunk, 4 legs x (hip, thigh, calf), PD servos."""

from __future__ import annotations

from .registry import ROBOTS
from .spec import ASSETS, RobotSpec

LEGS = ("FR", "FL", "RR", "RL")
"""Leg order (front right, front left, rear right, rear left), as in Unitree's SDK."""

# Per-leg values, in (hip, thigh, calf) order. Source: robots/assets/quadruped/quadruped.xml.
_LOWER = (-0.863, -0.686, -2.818)
_UPPER = (0.863, 4.501, -0.888)
_EFFORT = (23.7, 23.7, 35.55)
_KP = 40.0
_KD = 1.0
# Hips 0.1 rad outward (negative on the right legs), thighs 0.8, calves -1.5 rad.
_POSE = {
    "FR": (-0.1, 0.8, -1.5),
    "FL": (0.1, 0.8, -1.5),
    "RR": (-0.1, 0.8, -1.5),
    "RL": (0.1, 0.8, -1.5),
}

_JOINTS = tuple(f"{leg}_{part}" for leg in LEGS for part in ("hip", "thigh", "calf"))

QUADRUPED = RobotSpec(
    name="quadruped",
    mjcf=ASSETS / "quadruped" / "scene.xml",
    joint_names=_JOINTS,
    actuator_names=_JOINTS,
    default_pose=tuple(q for leg in LEGS for q in _POSE[leg]),
    kp=(_KP,) * 12,
    kd=(_KD,) * 12,
    action_scale=0.25,
    joint_lower=_LOWER * 4,
    joint_upper=_UPPER * 4,
    effort_limit=_EFFORT * 4,
    base_body="trunk",
    sensors={
        "gyro": "imu_gyro",
        "accelerometer": "imu_acc",
        "orientation": "imu_quat",
        "linear_velocity": "imu_vel",
        **{f"touch_{leg}": f"{leg}_touch" for leg in LEGS},
    },
    feet=tuple(f"{leg}_foot" for leg in LEGS),
    sites={"imu": "imu", **{f"foot_{leg}": f"{leg}_foot" for leg in LEGS}},
    source=(
        "Unitree Go1 public specifications and link parameters (rounded): ~13 kg, "
        "thigh and calf 0.213 m, torque limits 23.7/23.7/35.55 N m; PD kp=40, kd=1 "
        "(legged_gym / walk-these-ways range); default pose from legged_gym."
    ),
)

ROBOTS.add(QUADRUPED.name, QUADRUPED)
