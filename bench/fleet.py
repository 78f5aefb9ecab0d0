"""The fleet server under load: twelve simulated robot hosts at 10 Hz status and 2 fps
thumbnails, a dashboard open in headless Chromium, and one more WebSocket client that
times every update.

Server CPU is the `unilab fleet serve` process's user + system time over the measured
window (percent of one core). Update latency is, per robot status, the time from the host
sending it (its message time) to a WebSocket client holding the delta that carries it:
link, decode, state, the push coalescing (`PUSH_S`, 50 ms), JSON and the socket. Hosts,
server and client share one machine and its clock.

    unilab bench fleet [--robots 12] [--seconds 20] [--no-browser] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from unilab.bench.common import machine_info, print_table, write_json
from unilab.teleop.fleet.keys import make_fleet_keys
from unilab.teleop.fleet.launch import ServerProcess, chromium_path, start_server
from unilab.teleop.fleet.sim import start_fleet_sim, stop_fleet_sim
from unilab.teleop.fleet.web import PUSH_S
from unilab.teleop.fleet.wire import STATUS_HZ, THUMB_FPS

TOKEN = "fleet-bench-token"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (Linux /proc; its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class LatencyProbe:
    """A WebSocket client on its own thread: first sight of each (robot, status time)."""

    def __init__(self, server: ServerProcess) -> None:
        from websockets.sync.client import connect

        url = server.url.replace("http", "ws", 1) + f"/ws?token={server.token}&operator=bench"
        self.ws = connect(url, max_size=2**22)
        self.latency_s: list[float] = []
        self.statuses = 0
        self.measuring = False
        self.seen: dict[str, float] = {}
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                text = self.ws.recv(timeout=0.5)
            except TimeoutError:
                continue
            except Exception:  # the server went away: the measurement ends
                return
            now = time.time()
            msg = json.loads(text)
            for name, robot in msg.get("robots", {}).items():
                sent = robot.get("sent_time", 0.0)
                if sent and sent != self.seen.get(name):
                    self.seen[name] = sent
                    if self.measuring:
                        self.latency_s.append(now - sent)
                        self.statuses += 1

    def close(self) -> None:
        self._stop = True
        self.ws.close()
        self.thread.join(timeout=5)


def _state(server: ServerProcess) -> dict[str, Any]:
    import urllib.request

    req = urllib.request.Request(f"{server.url}/api/state")
    req.add_header("Authorization", f"Bearer {server.token}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return dict(json.loads(resp.read()))


def _wait_robots(server: ServerProcess, robots: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = _state(server)["robots"].values()
        if sum(1 for r in shown if r["thumb_version"] > 0) == robots:
            return
        time.sleep(0.2)
    raise RuntimeError(f"not all {robots} robots reported a thumbnail in {timeout_s:.0f} s")


def measure(robots: int, seconds: float, warmup: float, browser: bool, shot: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="unilab-bench-fleet-"))
    keys = make_fleet_keys(work / "keys")
    server = start_server(keys.root, work, token=TOKEN)
    sims = []
    pw = chrome = None
    try:
        # One jammed arm and one failing policy, as on a real floor: the alerts, the queue
        # and their pushes are part of the load (and of the screenshot).
        faulty = robots >= 7
        sims = start_fleet_sim(
            robots=robots,
            fleet=server.link,
            keys=keys.root,
            workdir=work,
            stall=["sim-03"] if faulty else [],
            fail=["sim-07"] if faulty else [],
            fault_after_s=2.0,
        )
        _wait_robots(server, robots)
        if browser:
            from playwright.sync_api import sync_playwright

            pw = sync_playwright().start()
            chrome = pw.chromium.launch(executable_path=chromium_path(), headless=True)
            page = chrome.new_page(viewport={"width": 1366, "height": 768})
            page.goto(f"{server.url}/?token={TOKEN}&operator=bench")
            page.wait_for_function(
                f"() => document.querySelectorAll('article.tile').length === {robots}",
                timeout=30_000,
            )
        probe = LatencyProbe(server)
        time.sleep(warmup)
        pid = server.proc.pid
        before, thumbs0 = cpu_seconds(pid), _state(server)["robots"]
        t0 = time.monotonic()
        probe.measuring = True
        time.sleep(seconds)
        probe.measuring = False
        wall = time.monotonic() - t0
        after, thumbs1 = cpu_seconds(pid), _state(server)["robots"]
        memory = rss_mb(pid)
        cpu_s = after - before
        if chrome is not None:
            Path(shot).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=shot, full_page=True)
        probe.close()
    finally:
        if chrome is not None:
            chrome.close()
        if pw is not None:
            pw.stop()
        stop_fleet_sim(sims)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    lat = np.asarray(probe.latency_s) * 1e3
    thumbs = sum(thumbs1[n]["thumb_version"] - thumbs0[n]["thumb_version"] for n in thumbs1)
    received = sum(thumbs1[n]["updates"] - thumbs0[n]["updates"] for n in thumbs1)
    return {
        "robots": robots,
        "browser": browser,
        "seconds": round(wall, 1),
        "server_cpu_percent": 100 * cpu_s / wall,
        "server_rss_mb": memory,
        "status_hz_per_robot": received / wall / robots,
        "updates_seen_per_s": probe.statuses / wall,
        "thumbs_per_s": thumbs / wall,
        "latency_p50_ms": float(np.percentile(lat, 50)),
        "latency_p99_ms": float(np.percentile(lat, 99)),
        "latency_max_ms": float(lat.max()),
        "updates_timed": int(lat.size),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--robots", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--no-browser", action="store_true", help="no Chromium dashboard")
    parser.add_argument("--out", default="bench/results/fleet.json")
    parser.add_argument("--screenshot", default="bench/results/fleet_dashboard.png")
    args = parser.parse_args(argv)
    packages = ("numpy", "mujoco", "pyzmq", "starlette", "uvicorn", "websockets", "playwright")
    machine = machine_info(packages)  # before: its load average is the one at the start
    row = measure(args.robots, args.seconds, args.warmup, not args.no_browser, args.screenshot)
    row["load_average_after"] = list(os.getloadavg())
    print_table(
        [row],
        [
            "robots",
            "server_cpu_percent",
            "status_hz_per_robot",
            "thumbs_per_s",
            "latency_p50_ms",
            "latency_p99_ms",
            "latency_max_ms",
        ],
    )
    notes = [
        f"hosts send status at {STATUS_HZ:g} Hz and a JPEG thumbnail at {THUMB_FPS:g} fps; the"
        f" server pushes a browser at most every {PUSH_S * 1e3:.0f} ms (latency includes it).",
        "server CPU: percent of one core, the fleet serve process only; robot hosts, camera"
        " processes and Chromium run on the same machine and are not counted.",
        "status_hz_per_robot: statuses the server took in; updates_seen_per_s: distinct"
        " statuses a WebSocket client saw (two within one push interval show as one).",
    ]
    data = {"machine": machine, "rows": [row], "notes": notes}
    if not args.no_browser:
        data["screenshot"] = args.screenshot
    out = write_json(args.out, data)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
