"""`unilab fleet sim --robots 12`: simulated robot hosts reporting to a fleet server, each
its own process (`unilab.teleop.fleet.sim_robot`), so killing one is a real host loss.

The launcher starts them, waits until every one has bound its sockets, writes a ready
file (JSON: robot name -> pid and command endpoint) when asked, and stops them on
Ctrl-C / SIGTERM or after `duration_s`. It does not restart a robot that dies: the fleet
server is what must notice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from unilab.teleop.fleet.keys import SERVER, SIM_ROBOT, FleetKeys

MAX_ROBOTS = 64
READY_TIMEOUT_S = 120.0


class FleetSimError(ValueError):
    """Bad input to the fleet simulation (exit 2)."""


def robot_name(i: int, prefix: str = "sim") -> str:
    return f"{prefix}-{i + 1:02d}"


@dataclass
class SimRobotProcess:
    name: str
    proc: subprocess.Popen[bytes]
    ready: Path
    log: Path
    endpoint: str = ""


def _pick(names: Sequence[str], robots: int, what: str, prefix: str) -> set[str]:
    valid = {robot_name(i, prefix) for i in range(robots)}
    bad = [n for n in names if n not in valid]
    if bad:
        first, last = robot_name(0, prefix), robot_name(robots - 1, prefix)
        raise FleetSimError(f"{what} {bad}: robots are named {first} .. {last}")
    return set(names)


def start_fleet_sim(
    *,
    robots: int,
    fleet: str,
    keys: str | os.PathLike[str],
    policy: str | None = None,
    stall: Sequence[str] = (),
    fail: Sequence[str] = (),
    fault_after_s: float = 5.0,
    seed: int = 0,
    thumbnails: bool = True,
    workdir: str | os.PathLike[str] | None = None,
    prefix: str = "sim",
) -> list[SimRobotProcess]:
    """Start the robot processes and wait until all are bound (or raise)."""
    if not 1 <= robots <= MAX_ROBOTS:
        raise FleetSimError(f"--robots {robots}: give 1 to {MAX_ROBOTS}")
    if fault_after_s < 0:
        raise FleetSimError(f"--fault-after {fault_after_s}: must be >= 0 seconds")
    if not prefix.replace("_", "").replace("-", "").isalnum() or len(prefix) > 32:
        raise FleetSimError(f"--prefix {prefix[:40]!r}: letters, digits, - and _ only")
    stalls = _pick(stall, robots, "--stall", prefix)
    fails = _pick(fail, robots, "--fail", prefix)
    if policy and not Path(policy).exists():
        raise FleetSimError(f"--policy {policy}: no such file or run directory")
    k = FleetKeys(Path(keys))
    try:
        k.require(SERVER, SIM_ROBOT)
    except ValueError as exc:
        raise FleetSimError(str(exc)) from None
    work = Path(workdir or tempfile.mkdtemp(prefix="unilab-fleet-sim-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    # Twelve hosts share two cores: keep BLAS and onnxruntime from each taking them all.
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    started: list[SimRobotProcess] = []
    for i in range(robots):
        name = robot_name(i, prefix)
        ready = work / f"{name}.ready"
        ready.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "unilab.teleop.fleet.sim_robot",
            "--name",
            name,
            "--fleet",
            fleet,
            "--key",
            k.secret(SIM_ROBOT),
            "--fleet-key",
            k.public(SERVER),
            "--allow",
            k.stations,
            "--seed",
            str(seed + i),
            "--ready-file",
            str(ready),
        ]
        if policy:
            cmd += ["--policy", str(policy)]
        if name in stalls:
            cmd += ["--stall-after", str(fault_after_s)]
        if name in fails:
            cmd += ["--fail-after", str(fault_after_s)]
        if not thumbnails:
            cmd.append("--no-thumbnails")
        log = work / f"{name}.log"
        with open(log, "wb") as err:  # a file, not a pipe: a chatty child never blocks
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        started.append(SimRobotProcess(name, proc, ready, log))
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        for robot in started:
            while not robot.ready.is_file() or not robot.ready.read_text().strip():
                if robot.proc.poll() is not None:
                    tail = robot.log.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{robot.name} exited with {robot.proc.returncode}: {tail}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{robot.name} not ready after {READY_TIMEOUT_S:.0f} s")
                time.sleep(0.05)
            robot.endpoint = robot.ready.read_text().split()[0]
    except BaseException:
        stop_fleet_sim(started)
        raise
    return started


def stop_fleet_sim(robots: Sequence[SimRobotProcess], timeout_s: float = 10.0) -> None:
    for r in robots:
        if r.proc.poll() is None:
            r.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for r in robots:
        try:
            r.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait()


def write_ready(path: str | os.PathLike[str], robots: Sequence[SimRobotProcess]) -> None:
    info = {r.name: {"pid": r.proc.pid, "endpoint": r.endpoint} for r in robots}
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(info, indent=1))
    tmp.replace(path)  # readers never see half a file


def run_fleet_sim(
    *, ready_file: str | None = None, duration_s: float | None = None, **options: object
) -> int:
    robots = start_fleet_sim(**options)  # type: ignore[arg-type]
    stop = {"now": False}

    def request_stop(*_: object) -> None:
        stop["now"] = True

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if ready_file:
            write_ready(ready_file, robots)
        print(f"fleet sim: {len(robots)} robots reporting to {options.get('fleet')}", flush=True)
        end = None if duration_s is None else time.monotonic() + duration_s
        while not stop["now"] and (end is None or time.monotonic() < end):
            time.sleep(0.2)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        stop_fleet_sim(robots)
    return 0
