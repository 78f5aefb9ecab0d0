"""A fleet server restart on the same link endpoint: the robot hosts that kept running are
told they never said hello (`no_hello`), greet again, and show up on the new server."""

from __future__ import annotations

import socket
from pathlib import Path

from fleet_fixtures import TOKEN, get_json, wait_for

from unilab.teleop.fleet.events import read_events
from unilab.teleop.fleet.keys import make_fleet_keys
from unilab.teleop.fleet.launch import start_server
from unilab.teleop.fleet.sim import start_fleet_sim, stop_fleet_sim


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_hosts_rejoin_a_restarted_server(tmp_path: Path) -> None:
    keys = make_fleet_keys(tmp_path / "keys")
    link = ("--link", f"tcp://127.0.0.1:{free_port()}")
    first = start_server(keys.root, tmp_path / "first", token=TOKEN, extra=link)
    robots = []
    second = None
    try:
        robots = start_fleet_sim(
            robots=1, fleet=first.link, keys=keys.root, thumbnails=False, workdir=tmp_path
        )

        def joined(url: str) -> bool:
            view = get_json(f"{url}/api/robots/sim-01")
            return view[0] == 200 and view[1]["updates"] > 2 and not view[1]["lost"]

        wait_for(lambda: joined(first.url), 30, "sim-01 on the first server")
        assert first.stop() == 0  # SIGTERM: a clean stop, logged
        assert read_events(first.events)[-1]["kind"] == "server_stopped"
        second = start_server(keys.root, tmp_path / "second", token=TOKEN, extra=link)
        assert second.link == first.link
        wait_for(lambda: joined(second.url), 15, "sim-01 on the restarted server")
        assert robots[0].proc.poll() is None  # the same host process, never restarted
    finally:
        stop_fleet_sim(robots)
        first.stop()
        if second is not None:
            second.stop()
