"""One training process per run directory: an exclusive `flock` on `<run>/.lock`.

Two `unilab train resume=RUN` at once would both append to metrics, both write
`ckpt_*.pt` and worker states, and pair each other's files on the next resume. The lock is
taken before anything in the run directory is written and held until the run ends; the
kernel drops it when the process dies, so a crashed run never leaves the directory locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from unilab.config.errors import ConfigError

LOCK_NAME = ".lock"


class RunDirBusy(ConfigError):
    """Another process holds the run directory."""


class RunLock:
    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirBusy(
                f"run directory {self.path.parent} is in use by another unilab process "
                f"(pid {holder}); wait for it to finish or stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
