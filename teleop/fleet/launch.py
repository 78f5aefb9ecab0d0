"""Start a `unilab fleet serve` process and wait for it (the tests and `bench/fleet.py`).

The server runs as its own process, as an operator would run it, so a test talks to the
real uvicorn server and the real link over loopback sockets.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

READY_TIMEOUT_S = 60.0
CHROMIUM_ENV = "UNILAB_CHROMIUM"


def chromium_path() -> str:
    """The Chromium that Playwright drives: $UNILAB_CHROMIUM, else Debian's `chromium` (the
    project never downloads Playwright's own browser builds)."""
    return os.environ.get(CHROMIUM_ENV) or shutil.which("chromium") or "/usr/bin/chromium"


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    url: str
    link: str
    token: str
    events: Path
    log: Path

    def stop(self, timeout_s: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


def start_server(
    keys: str | os.PathLike[str],
    workdir: str | os.PathLike[str],
    *,
    token: str,
    extra: tuple[str, ...] = (),
) -> ServerProcess:
    """`unilab fleet serve` on free ports of 127.0.0.1; returns once it serves."""
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    ready, events, log = work / "server.ready", work / "events.jsonl", work / "server.log"
    ready.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "unilab.cli",
        "fleet",
        "serve",
        "--keys",
        str(keys),
        "--port",
        "0",
        "--link",
        "tcp://127.0.0.1:*",
        "--events",
        str(events),
        "--ready-file",
        str(ready),
        *extra,
    ]
    env = {**os.environ, "UNILAB_FLEET_TOKEN": token}
    with open(log, "wb") as out:  # a file, not a pipe: a chatty server never blocks
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.is_file():
        if proc.poll() is not None:
            raise RuntimeError(f"fleet serve exited with {proc.returncode}: {log.read_text()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"fleet serve not ready after {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    return ServerProcess(proc, info["url"], info["link"], token, events, log)
