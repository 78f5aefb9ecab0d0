"""Starting robot hosts and operator stations as real processes (`python -m ...`) for the
HIL tests and benches."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port_pair() -> int:
    """A port p with p and p + 1 free on loopback (command and status sockets)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return int(port)
    raise RuntimeError("no free port pair on loopback")


def start_host(
    keys_root: Path,
    allow: Path,
    endpoint: str,
    tmp: Path,
    *extra: str,
    robot: str = "sim:arm_reach",
) -> subprocess.Popen[bytes]:
    ready = tmp / f"host-ready-{time.monotonic_ns()}"
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "unilab.teleop.robot_host",
            "--robot",
            robot,
            "--key",
            str(keys_root / "private" / "robot.key_secret"),
            "--allow",
            str(allow),
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
            _out, err = proc.communicate()
            raise RuntimeError(f"robot host exited {proc.returncode}: {err.decode()[-2000:]}")
        if time.monotonic() > end:
            proc.kill()
            raise RuntimeError("robot host did not become ready within 60 s")
        time.sleep(0.05)
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> tuple[str, str]:
    if proc.poll() is None:
        proc.terminate()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return out.decode(errors="replace"), err.decode(errors="replace")
