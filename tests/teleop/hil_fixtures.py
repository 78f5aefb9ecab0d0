"""Keys and an in-process robot host (real sockets, real MuJoCo task) for the HIL tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from unilab.teleop.session_tools import KeySet

Keys = KeySet


@contextmanager
def running_host(keys: Keys, **host_options: Any) -> Iterator[Any]:
    """A robot host over a simulated arm_reach on a free loopback port, on a thread."""
    from unilab.deploy.sim_driver import SimDriver
    from unilab.teleop.link import HostSockets
    from unilab.teleop.robot_host import RobotHost

    task = host_options.pop("task", {"name": "arm_reach"})
    cameras = host_options.pop("cameras", ())
    driver = SimDriver(task, cameras=cameras)
    driver.connect()
    sockets = HostSockets.bind(
        secret_key=keys.secret("robot"), allow_dir=keys.allow, endpoint="tcp://127.0.0.1:0"
    )
    host = RobotHost(driver, sockets, **host_options)
    thread = threading.Thread(target=host.run, name="robot-host", daemon=True)
    thread.start()
    try:
        yield host
    finally:
        host.request_stop()
        thread.join(timeout=10)
        sockets.close()
        driver.disconnect()
