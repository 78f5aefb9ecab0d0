"""Finding LeRobot's robot and teleoperator classes across lerobot 0.4.x.

Module names changed inside 0.4: up to 0.4.2 the SO arms live in
`lerobot.robots.so101_follower` / `so100_follower` and `lerobot.teleoperators.so101_leader`;
from 0.4.3 in `lerobot.robots.so_follower` and `lerobot.teleoperators.so_leader`. A config
class is registered (draccus choice registry) when its module is imported, so we import
every candidate module that exists and then ask the registry by type name, as LeRobot's
own CLI does, and build the device with LeRobot's factory.

lerobot pins its own torch, so it lives in its own environment (`make test-lerobot`,
docs/decisions/0008); everything here fails with `LeRobotUnavailableError` naming that.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

ROBOT_MODULES: dict[str, tuple[str, ...]] = {
    "so100_follower": ("lerobot.robots.so_follower", "lerobot.robots.so100_follower"),
    "so101_follower": ("lerobot.robots.so_follower", "lerobot.robots.so101_follower"),
    "koch_follower": ("lerobot.robots.koch_follower",),
    "omx_follower": ("lerobot.robots.omx_follower",),
}
TELEOP_MODULES: dict[str, tuple[str, ...]] = {
    "so100_leader": ("lerobot.teleoperators.so_leader", "lerobot.teleoperators.so100_leader"),
    "so101_leader": ("lerobot.teleoperators.so_leader", "lerobot.teleoperators.so101_leader"),
    "koch_leader": ("lerobot.teleoperators.koch_leader",),
    "omx_leader": ("lerobot.teleoperators.omx_leader",),
}
INSTALL_HINT = (
    "install it in its own environment (`make test-lerobot` builds .venv-lerobot with "
    "lerobot==0.4.4; docs/decisions/0008) and run the robot host from there"
)


class LeRobotUnavailableError(RuntimeError):
    """lerobot is not installed here, does not know the device type, or the hardware is
    not connected; the message says which and what to do."""


def check_port(port: str, what: str) -> None:
    """A serial port path must exist before LeRobot tries to open it."""
    if port.startswith("/dev/") and not Path(port).exists():
        raise LeRobotUnavailableError(
            f"{what}: no device at {port}. Connect the arm's USB adapter; `lerobot-find-port` "
            "lists the ports (on Linux usually /dev/ttyACM0 or /dev/ttyUSB0)"
        )


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if exc.name and (exc.name == "lerobot" or exc.name.startswith("lerobot.")):
            raise LeRobotUnavailableError(
                f"the lerobot package is not installed: {INSTALL_HINT}"
            ) from None
        raise


def _registered(kind: str, type_name: str, modules: dict[str, tuple[str, ...]]) -> tuple[Any, Any]:
    package = _import(f"lerobot.{kind}")
    for module in modules.get(type_name, ()):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            continue  # the other name of this module in another 0.4.x release
    base = package.RobotConfig if kind == "robots" else package.TeleoperatorConfig
    factory = (
        package.make_robot_from_config
        if kind == "robots"
        else package.make_teleoperator_from_config
    )
    try:
        config_cls = base.get_choice_class(type_name)
    except (KeyError, ValueError):
        known = sorted(getattr(base, "get_known_choices", lambda: {})())
        raise LeRobotUnavailableError(
            f"lerobot does not know the {kind[:-1]} type {type_name!r}; known: {known}"
        ) from None
    return config_cls, factory


def make_lerobot_robot(type_name: str, port: str, **config: Any) -> Any:
    """A LeRobot robot (not connected) of `type_name` on `port`."""
    check_port(port, f"robot {type_name}")
    config_cls, factory = _registered("robots", type_name, ROBOT_MODULES)
    return factory(config_cls(port=port, **config))


def make_lerobot_teleoperator(type_name: str, port: str, **config: Any) -> Any:
    """A LeRobot teleoperator (leader arm; not connected) of `type_name` on `port`."""
    check_port(port, f"teleoperator {type_name}")
    config_cls, factory = _registered("teleoperators", type_name, TELEOP_MODULES)
    return factory(config_cls(port=port, **config))
