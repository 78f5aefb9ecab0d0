"""Cart-pole: one force on the cart, an unactuated hinged pole. The cheapest scene."""

from __future__ import annotations

from .registry import ROBOTS
from .spec import ASSETS, RobotSpec

CARTPOLE = RobotSpec(
    name="cartpole",
    mjcf=ASSETS / "cartpole" / "scene.xml",
    # Only the cart is actuated; the pole's hinge is read through the sensors below.
    joint_names=("slider",),
    actuator_names=("cart_force",),
    default_pose=(0.0,),
    kp=(0.0,),
    kd=(0.0,),
    # ctrl = action in [-1, 1]; the motor's gear (10) turns it into at most 10 N.
    action_scale=1.0,
    joint_lower=(-2.4,),
    joint_upper=(2.4,),
    effort_limit=(10.0,),
    sensors={
        "cart_position": "cart_pos",
        "pole_angle": "pole_angle",
        "cart_velocity": "cart_vel",
        "pole_angular_velocity": "pole_angvel",
    },
    sites={"pole_tip": "pole_tip"},
    control_mode="force",
    source=(
        "Classic cart-pole (Barto, Sutton & Anderson 1983; sizes as in dm_control and "
        "gymnasium): 1 kg cart, 0.1 kg 1 m pole, 10 N motor."
    ),
)

ROBOTS.add(CARTPOLE.name, CARTPOLE)
