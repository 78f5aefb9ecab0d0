"""What a controller needs to know about a robot, beyond its MJCF.

A spec is the single source for joint order, default pose, PD gains, limits and action
scale: tasks map actions with it, and export writes it into the ONNX metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ASSETS = Path(__file__).parent / "assets"
CONTROL_MODES = ("position", "force")


@dataclass(frozen=True)
class RobotSpec:
    name: str
    mjcf: Path
    """Scene file to load (robot plus its floor, table or objects)."""
    joint_names: tuple[str, ...]
    """Actuated joints in policy order; the action vector follows this order."""
    actuator_names: tuple[str, ...]
    """One position (or motor) actuator per entry of joint_names, same order."""
    default_pose: tuple[float, ...]
    """Joint positions (rad or m) the action is an offset from."""
    kp: tuple[float, ...]
    kd: tuple[float, ...]
    action_scale: float
    """Joint target = default_pose + action_scale * action."""
    joint_lower: tuple[float, ...]
    joint_upper: tuple[float, ...]
    effort_limit: tuple[float, ...]
    base_body: str | None = None
    """Floating-base body for legged robots; None for fixed-base robots."""
    keyframe: str | None = "home"
    """Keyframe holding the default state (base pose included)."""
    sensors: dict[str, str] = field(default_factory=dict)
    """Role -> MJCF sensor name, e.g. {"gyro": "imu_gyro", "accelerometer": "imu_acc", "orientation": "imu_quat"}."""
    feet: tuple[str, ...] = ()
    """Foot geoms (legged robots), used for contact terms."""
    end_effector_site: str | None = None
    gripper_actuator: str | None = None
    source: str = ""
    """Where the masses, inertias and gains come from."""
    control_mode: str = "position"
    """"position": actuators are PD position servos (kp, kd above) and an action is a target
    offset; "force": actuators are motors and an action is a force/torque command
    (ctrl = action_scale * action, force = gear * ctrl, kp and kd unused)."""
    bodies: dict[str, str] = field(default_factory=dict)
    """Role -> MJCF body name for scene bodies a task uses, e.g. {"object": "cube"}."""
    sites: dict[str, str] = field(default_factory=dict)
    """Role -> MJCF site name, e.g. {"imu": "imu", "target": "target"}."""

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        for attr in (
            "actuator_names",
            "default_pose",
            "kp",
            "kd",
            "joint_lower",
            "joint_upper",
            "effort_limit",
        ):
            if len(getattr(self, attr)) != n:
                raise ValueError(
                    f"robot {self.name!r}: {attr} has {len(getattr(self, attr))} entries, "
                    f"joint_names has {n}"
                )
        if self.control_mode not in CONTROL_MODES:
            raise ValueError(
                f"robot {self.name!r}: control_mode {self.control_mode!r} is not one of "
                f"{', '.join(CONTROL_MODES)}"
            )

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)
