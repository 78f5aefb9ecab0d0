"""The robot registry: name -> RobotSpec. Each robot module adds its spec on import; the
first lookup imports `unilab.robots`, which imports them all."""

from __future__ import annotations

from unilab.registry import Registry

from .spec import RobotSpec

ROBOTS: Registry[RobotSpec] = Registry("robot", package="unilab.robots")


def get_robot(name: str) -> RobotSpec:
    """The spec registered as `name`; an unknown name raises a KeyError listing the known ones."""
    return ROBOTS.get(name)


def list_robots() -> list[str]:
    """Registered robot names, sorted."""
    return ROBOTS.names()
