"""Link loss: SIGKILL the operator station process and the simulated robot host safe-stops
within 150 ms (3 control periods of 20 ms plus scheduling). A few trials here;
`unilab bench hil --part link_loss` runs 100 and reports the p99."""

from __future__ import annotations

from pathlib import Path

from hil_fixtures import Keys

from unilab.teleop.link import ClientLink
from unilab.teleop.session_tools import (
    free_port_pair,
    link_loss_trial,
    start_host_process,
    start_station_process,
    stop_process,
)

LIMIT_S = 0.150


def test_killing_the_station_safe_stops_the_robot(
    keys: Keys, demo_policy: Path, tmp_path: Path
) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port_pair()}"
    host = start_host_process(keys, endpoint, tmp_path)
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
            station = start_station_process(keys, endpoint, demo_policy)
            try:
                latency, reason = link_loss_trial(monitor, station)
                assert reason.startswith("watchdog"), reason
                latencies.append(latency)
            finally:
                if station.poll() is None:
                    station.kill()
                    station.wait()
                if station.stderr is not None:
                    station.stderr.close()
        assert all(0.0 <= t < LIMIT_S for t in latencies), latencies
    finally:
        monitor.close()
        stop_process(host)
