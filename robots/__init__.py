"""unilab.robots: MJCF scenes and the specs (joint order, gains, default pose) that drive them.

from unilab.robots import get_robot, list_robots
from unilab.robots.validate import load_model

spec = get_robot("quadruped")
model = load_model(spec)  # loads the scene and checks the spec against it
"""

from __future__ import annotations

# Importing each robot module registers its spec.
from . import arm, cartpole, humanoid, planar_arm, quadruped
from .registry import ROBOTS, get_robot, list_robots
from .spec import RobotSpec

__all__ = [
    "ROBOTS",
    "RobotSpec",
    "arm",
    "cartpole",
    "get_robot",
    "humanoid",
    "list_robots",
    "planar_arm",
    "quadruped",
]
