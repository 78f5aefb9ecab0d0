"""Running HIL parts as real processes on loopback and checking what they recorded: used by
the HIL tests and by bench/hil.py (scripted sessions, link-loss trials).

- `host_in_thread`: a robot host on a thread of this process (counters readable directly);
- `start_host_process` / `stop_process`: `python -m unilab.teleop.robot_host` with a ready
  file, so callers wait for the bound sockets rather than sleeping;
- `run_scripted_session`: a robot host process plus an operator station in this process
  driven by a `VirtualOperator`;
- `compare_labels`: every stored episode's `is_intervention` against the virtual
  operator's own schedule, computed without looking at the recording;
- `link_loss_trial`: SIGKILL an operator station process and time the host's safe stop.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from unilab.teleop.devices import DISCARD, RERECORD
from unilab.teleop.link import ClientLink
from unilab.teleop.recording import spans_of


@dataclass(frozen=True)
class KeySet:
    """A key directory from `generate_keypair` plus an allowlist directory."""

    root: Path
    allow: Path

    def secret(self, name: str) -> str:
        return str(self.root / "private" / f"{name}.key_secret")

    def public(self, name: str) -> str:
        return str(self.root / "public" / f"{name}.key")


def make_keyset(root: Path, clients: Sequence[str] = ("alice", "monitor")) -> KeySet:
    """Keys for `robot`, each client and an `intruder` (left out of the allowlist)."""
    import shutil

    from unilab.teleop.keys import generate_keypair

    for name in ("robot", *clients, "intruder"):
        generate_keypair(root, name)
    allow = root / "allowed"
    allow.mkdir()
    for name in clients:
        shutil.copy(root / "public" / f"{name}.key", allow / f"{name}.key")
    return KeySet(root, allow)


@contextmanager
def host_in_thread(keys: KeySet, **host_options: Any) -> Iterator[Any]:
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


def free_port_pair() -> int:
    """A port p with p and p + 1 free on loopback (command and status sockets)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair on loopback")


def start_host_process(
    keys: KeySet, endpoint: str, workdir: Path, *extra: str, robot: str = "sim:arm_reach"
) -> subprocess.Popen[bytes]:
    ready = workdir / f"host-ready-{time.monotonic_ns()}"
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "unilab.teleop.robot_host",
            "--robot",
            robot,
            "--key",
            keys.secret("robot"),
            "--allow",
            str(keys.allow),
            "--endpoint",
            endpoint,
            "--ready-file",
            str(ready),
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    end = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise RuntimeError(f"robot host exited {proc.returncode}: {err.decode()[-2000:]}")
        if time.monotonic() > end:
            stop_process(proc)
            raise RuntimeError("robot host did not become ready within 60 s")
        time.sleep(0.05)
    return proc


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> tuple[str, str]:
    if proc.poll() is None:
        proc.terminate()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return out.decode(errors="replace"), err.decode(errors="replace")


def run_scripted_session(
    keys: KeySet,
    policy: Path,
    store: Path,
    workdir: Path,
    *,
    duration_s: float,
    seed: int,
    horizon: int,
    script: Mapping[tuple[int, int], str],
    host_args: Sequence[str] = (),
    robot: str = "sim:arm_reach",
    observe: Any = None,
) -> tuple[dict[str, Any], Any]:
    """A robot host process and an operator station here, with a virtual operator; returns
    the station's report and the operator (its schedule and the keys it pressed).
    `observe(policy)`, when given, may wrap the loaded `HilPolicy` (a test that looks at
    what the policy was fed)."""
    from unilab.teleop.policy_runner import load_hil_policy
    from unilab.teleop.station import OperatorStation
    from unilab.teleop.virtual_operator import VirtualOperator

    endpoint = f"tcp://127.0.0.1:{free_port_pair()}"
    host = start_host_process(keys, endpoint, workdir, *host_args, robot=robot)
    operator = VirtualOperator(seed, horizon=horizon, script=script)
    link = ClientLink(
        endpoint, secret_key=keys.secret("alice"), server_key=keys.public("robot"), sender="station"
    )
    hil_policy = load_hil_policy(policy, seed=seed)
    if observe is not None:
        observe(hil_policy)
    station = OperatorStation(
        link,
        policy=hil_policy,
        device=operator,
        store=store,
        operator="alice",
        auto_resume=True,
    )
    try:
        station.connect()
        report = station.run(duration_s=duration_s)
    finally:
        link.close()
        stop_process(host)
    return report.to_dict(), operator


@dataclass
class LabelCheck:
    episodes: int = 0
    frames: int = 0
    spans: int = 0
    full_length: int = 0
    mismatched_episodes: list[int] = field(default_factory=list)
    """Episodes whose labels differ from the takeovers the operator performed."""
    off_schedule_episodes: list[int] = field(default_factory=list)
    """Episodes whose performed takeovers were later than scheduled (a skipped tick)."""
    dropped_but_stored: list[int] = field(default_factory=list)
    held_frames: int = 0
    ends: dict[str, int] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return not self.mismatched_episodes and not self.dropped_but_stored


def compare_labels(store_path: Path, operator: Any, episode_frames: int) -> LabelCheck:
    """Each stored episode's labels against the takeover spans the virtual operator
    performed in its session episode (and those against its schedule); episodes the
    operator discarded or re-recorded must be absent."""
    from unilab.data import EpisodeStore

    dropped = {ep for ep, _, ev in operator.pressed if ev in (DISCARD, RERECORD)}
    out = LabelCheck()
    with EpisodeStore.open(store_path) as store:
        for i in range(len(store)):
            meta = store.meta(i)
            ep = store.episode(i, ["is_intervention", "held"])
            se = int(meta.tags["session_episode"])
            labels = ep["is_intervention"]
            performed = operator.performed_labels(se, len(labels))
            if not np.array_equal(labels, performed):
                out.mismatched_episodes.append(se)
            if not np.array_equal(performed, operator.expected_labels(se, len(labels))):
                out.off_schedule_episodes.append(se)
            if se in dropped:
                out.dropped_but_stored.append(se)
            end = str(meta.tags.get("end", ""))
            out.ends[end] = out.ends.get(end, 0) + 1
            out.full_length += int(end == "time_limit" and len(labels) == episode_frames)
            out.episodes += 1
            out.frames += len(labels)
            out.spans += len(spans_of(labels))
            out.held_frames += int(ep["held"].sum())
    return out


def start_station_process(
    keys: KeySet, endpoint: str, policy: Path, duration_s: float = 120.0
) -> subprocess.Popen[bytes]:
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
            str(duration_s),
            # A stall of the station on a busy box can trip the watchdog before the kill;
            # resuming keeps the trial about the kill.
            "--auto-resume",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def link_loss_trial(
    monitor: ClientLink, station: subprocess.Popen[bytes], settle_ticks: int = 25
) -> tuple[float, str]:
    """Wait until `station` has driven the robot for `settle_ticks` ticks, SIGKILL it, and return
    (seconds from the kill to the host's safe stop, stop reason). Both times are
    CLOCK_MONOTONIC on this machine."""
    sub = monitor.status
    assert sub is not None, "monitor must subscribe first"
    end = time.monotonic() + 60
    driven = 0  # ticks that applied a fresh command from the station
    while driven < settle_ticks:
        if time.monotonic() > end:
            raise RuntimeError("the station never took control")
        if station.poll() is not None:
            err = station.stderr.read().decode() if station.stderr else ""
            raise RuntimeError(f"station exited early: {err[-2000:]}")
        msg = sub.recv(1.0)
        if msg is not None and msg.body["mode"] == "running" and not msg.body["applied"]["held"]:
            driven += 1
    killed_at = time.monotonic()
    os.kill(station.pid, signal.SIGKILL)
    station.wait()
    while True:
        msg = sub.recv(2.0)
        if msg is None:
            raise RuntimeError("no status from the robot host after the kill")
        if msg.body["mode"] == "stopped" and msg.body["stopped_at"] >= killed_at:
            return float(msg.body["stopped_at"] - killed_at), str(msg.body["stop_reason"])
