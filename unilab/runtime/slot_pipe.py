"""A raw os.pipe that carries int32 slot ids between processes.

Each id is one 4-byte write, and POSIX makes pipe writes of at most PIPE_BUF bytes atomic,
so many writers can share one pipe and a writer killed mid-call never leaves half an id.
Both ends are non-blocking: readers wait with poll(2) and then drain whatever is there, so
ids arrive in batches without a per-message lock (unlike mp.Queue, ≈0.2 ms per hand-off).

Pipe ends travel to workers only while the supervisor starts them (spawn passes the file
descriptors); pickling one anywhere else is refused.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
from multiprocessing import context, reduction
from typing import Any

import numpy as np

_ID = np.dtype("<i4")
_READ_CHUNK = 4096  # bytes; PIPE_BUF on Linux, a multiple of the id size


class SlotPipe:
    """Both ends of one pipe; each process uses the end its role needs."""

    def __init__(self, read_fd: int | None = None, write_fd: int | None = None) -> None:
        if read_fd is None and write_fd is None:
            read_fd, write_fd = os.pipe()
            os.set_blocking(read_fd, False)
            os.set_blocking(write_fd, False)
        self.read_fd = read_fd
        self.write_fd = write_fd
        self._partial = b""
        self._poller: select.poll | None = None

    def send(self, slot_id: int) -> bool:
        """Write one id; False when the pipe is full (the id is then a lost wake-up hint)."""
        if self.write_fd is None:
            raise ValueError("this SlotPipe has no write end")
        try:
            os.write(self.write_fd, int(slot_id).to_bytes(4, "little", signed=True))
        except BlockingIOError:
            return False
        return True

    def wait(self, timeout: float) -> bool:
        """Block until readable or `timeout` seconds pass; True when readable."""
        if self.read_fd is None:
            raise ValueError("this SlotPipe has no read end")
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self.read_fd, select.POLLIN)
        ms = None if math.isinf(timeout) else max(0.0, timeout) * 1000.0
        return bool(self._poller.poll(ms))

    def drain(self) -> list[int]:
        """Every id currently in the pipe, in write order; never blocks."""
        if self.read_fd is None:
            raise ValueError("this SlotPipe has no read end")
        data = self._partial
        while True:
            try:
                chunk = os.read(self.read_fd, _READ_CHUNK)
            except BlockingIOError:
                break
            if not chunk:  # every write end closed
                break
            data += chunk
            if len(chunk) < _READ_CHUNK:
                break
        whole = len(data) - len(data) % 4
        self._partial = data[whole:]  # cannot happen with atomic 4-byte writes; kept for safety
        return np.frombuffer(data[:whole], dtype=_ID).tolist()

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.read_fd = None
        self.write_fd = None
        self._poller = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if context.get_spawning_popen() is None:
            raise TypeError(
                "a SlotPipe can only be passed to a process while it is being started "
                "(as an argument of multiprocessing.Process)"
            )
        ends = tuple(
            None if fd is None else reduction.DupFd(fd) for fd in (self.read_fd, self.write_fd)
        )
        return _rebuild_slot_pipe, ends


def _rebuild_slot_pipe(read_end: Any, write_end: Any) -> SlotPipe:
    read_fd = None if read_end is None else read_end.detach()
    write_fd = None if write_end is None else write_end.detach()
    return SlotPipe(read_fd, write_fd)
