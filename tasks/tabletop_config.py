"""The tabletop family's shared configuration: scene, cameras, looks, the end-effector
action scale, and which parts make up the proprioception group."""

from __future__ import annotations

from dataclasses import dataclass, field

from unilab.config.schema import TaskConfig

PROPRIO_PARTS = {
    "joint_pos": 7,
    "joint_vel": 7,
    "gripper": 1,
    "ee_pos": 3,
    "ee_yaw": 2,
    "ee_target": 3,
    "ee_target_yaw": 2,
    "previous_action": 5,
}
"""Named parts of the proprioception group and their widths (`TabletopConfig.proprio`)."""
PROPRIO_DIM = sum(PROPRIO_PARTS.values())
"""Width of the proprioception group with every part (the default)."""


@dataclass
class TabletopConfig(TaskConfig):
    episode_length_s: float = 10.0
    cameras: list[str] = field(default_factory=lambda: ["front", "wrist"])
    """Cameras the policy observes, as images/<camera> groups; [] renders nothing. The
    scene has `front` (across the table) and `wrist` (on the hand)."""
    image_size: int = 64
    """Width and height (pixels) of every camera image."""
    depth: bool = False
    """Also observe depth/<camera> (float32 metres) for every camera."""
    shadows: bool = False
    """Render shadows and reflections (several times slower on a CPU renderer)."""
    instruction_length: int = 16
    """Token ids per instruction (padded with 0)."""
    state_policy: bool = False
    """Give the policy group the privileged object state too (state-based RL baselines)."""
    proprio: list[str] = field(default_factory=lambda: list(PROPRIO_PARTS))
    """Parts of the proprioception (`policy` group), in this order: joint_pos, joint_vel,
    gripper, ee_pos, ee_yaw, ee_target, ee_target_yaw, previous_action. Imitation
    policies do better without joint_vel and previous_action: both echo the expert's last
    action, which invites copying it instead of reading the scene (docs/vla.md)."""
    terminate_on_success: bool = True
    """End the episode (terminated) at the first step the task is solved."""
    num_distractors: int = 1
    """Cubes besides the ones the instruction names."""
    max_step: float = 0.03
    """End-effector displacement (m) per control step at |action| = 1."""
    max_yaw_step: float = 0.1
    """Hand yaw change (rad) per control step at |action| = 1."""
    max_lead: float = 0.08
    """The setpoint stays within this distance (m) of the measured fingertip."""
    max_yaw_lead: float = 0.6
    """The yaw setpoint stays within this angle (rad) of the measured hand yaw."""
    init_joint_noise: float = 0.05
    """Initial arm joint positions are the ready pose +- this (rad), uniform."""
    colour_jitter: float = 0.06
    """Each RGB channel of every object's colour is shifted by up to +- this per episode."""
    light_jitter: float = 0.3
    """Light intensities are scaled by 1 +- this per episode."""
    light_direction_jitter: float = 0.35
    """The main light's direction is tilted by up to this (rad-ish, per axis) per episode."""
    camera_position_jitter: float = 0.01
    """Each camera is moved by up to +- this (m, per axis) per episode."""
    camera_angle_jitter: float = 0.03
    """Each camera is turned by up to +- this (rad, per axis) per episode."""
