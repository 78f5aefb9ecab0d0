"""Link loss: SIGKILL the operator station process and the simulated robot host safe-stops
within 150 ms (3 control periods of 20 ms plus scheduling). A few trials here;
bench/hil_link_loss.py runs 100 and reports the p99."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hil_fixtures import Keys
from hil_procs import free_port_pair, start_host, stop

from unilab.teleop.link import ClientLink

LIMIT_S = 0.150


def start_station(keys: Keys, endpoint: str, policy: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "unilab.teleop.station",
            "--robot",
            "sim:arm_reach",
            "--policy",
            str(policy),
            "--key",
            keys.secret("alice"),
            "--server-key",
            keys.public("robot"),
            "--endpoint",
            endpoint,
            "--device",
            "virtual:0",
            "--operator",
            "alice",
            "--duration",
            "120",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def kill_and_time(
    monitor: ClientLink, station: subprocess.Popen[bytes], settle_s: float = 0.5
) -> float:
    """Wait until the station drives the robot, SIGKILL it, and return the seconds from
    the kill to the host's safe stop (both CLOCK_MONOTONIC on this machine)."""
    sub = monitor.status
    assert sub is not None
    end = time.monotonic() + 60
    driving_since = None
    while True:
        msg = sub.recv(1.0)
        assert time.monotonic() < end, "the station never took control"
        if station.poll() is not None:
            raise AssertionError(f"station exited: {station.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        if msg is None:
            continue
        driving = msg.body["mode"] == "running" and not msg.body["applied"]["held"]
        if not driving:
            driving_since = None
            continue
        driving_since = driving_since or time.monotonic()
        if time.monotonic() - driving_since >= settle_s:
            break
    killed_at = time.monotonic()
    os.kill(station.pid, signal.SIGKILL)
    station.wait()
    while True:
        msg = sub.recv(2.0)
        assert msg is not None, "no status after the kill"
        if msg.body["mode"] == "stopped" and msg.body["stopped_at"] >= killed_at:
            assert msg.body["stop_reason"].startswith("watchdog")
            return float(msg.body["stopped_at"] - killed_at)


def test_killing_the_station_safe_stops_the_robot(
    keys: Keys, demo_policy: Path, tmp_path: Path
) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port_pair()}"
    host = start_host(keys.root, keys.allow, endpoint, tmp_path)
    monitor = ClientLink(
        endpoint,
        secret_key=keys.secret("monitor"),
        server_key=keys.public("robot"),
        sender="monitor",
    )
    try:
        monitor.hello("monitor", role="observer")
        monitor.subscribe()
        latencies = []
        for _ in range(3):
            station = start_station(keys, endpoint, demo_policy)
            try:
                latencies.append(kill_and_time(monitor, station))
            finally:
                if station.poll() is None:
                    station.kill()
                    station.wait()
                if station.stderr is not None:
                    station.stderr.close()
        assert all(0.0 <= t < LIMIT_S for t in latencies), latencies
    finally:
        monitor.close()
        stop(host)
