"""Named POSIX shared-memory segments with one owner.

The learner (parent) process creates every segment through a `SegmentOwner` and is the only
process that ever unlinks one. Workers `Segment.attach` by name. We call `shm_open` directly
instead of `multiprocessing.shared_memory.SharedMemory` because on Python < 3.13 the latter
registers every attach with a resource tracker that may unlink the segment when the attaching
process exits (cpython issue 82300); see docs/decisions/0004-shared-memory-runtime.md.

Names look like ``unilab_<owner pid>_<6 hex>_<purpose>`` (short: macOS allows 31 characters),
so a run's segments can be listed in /dev/shm, and segments left by an owner that was
SIGKILLed can be recognised and swept by `sweep_stale_segments`.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import sys
import weakref
from pathlib import Path

import numpy as np

if sys.platform == "win32":  # pragma: no cover - the runtime targets Linux (and macOS).
    raise ImportError("unilab.runtime needs POSIX shared memory (Linux or macOS)")

import _posixshmem

_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux only; elsewhere pages fault lazily
NAME_ROOT = "unilab_"
SHM_DIR = Path("/dev/shm")
_NAME_RE = re.compile(r"^unilab_(\d+)_[0-9a-f]+_")
_PURPOSE_RE = re.compile(r"^[a-z0-9]{1,8}$")


class Segment:
    """One mapped segment. Attachers never unlink; only `SegmentOwner` does."""

    def __init__(self, name: str, size: int, fd: int, *, populate: bool = False) -> None:
        self.name = name
        self.size = size
        flags = mmap.MAP_SHARED
        if populate:
            flags |= _MAP_POPULATE
        try:
            self._mmap: mmap.mmap | None = mmap.mmap(fd, size, flags=flags)
        finally:
            os.close(fd)  # the mapping keeps the memory; the descriptor is no longer needed

    @classmethod
    def attach(cls, name: str, size: int) -> Segment:
        """Map an existing segment created by the owner process.

        On Linux the mapping is populated at once (MAP_POPULATE): page tables are per
        process, so without it a worker's first pass over its slots runs several times
        slower than later ones.
        """
        try:
            fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"shared-memory segment {name!r} does not exist: its owner has unlinked it "
                "(run shut down) or never created it"
            ) from None
        actual = os.fstat(fd).st_size
        if actual < size:
            os.close(fd)
            raise ValueError(f"segment {name!r} holds {actual} bytes, expected at least {size}")
        return cls(name, size, fd, populate=True)

    @property
    def buffer(self) -> mmap.mmap:
        if self._mmap is None:
            raise ValueError(f"segment {self.name!r} is closed")
        return self._mmap

    def array(
        self, dtype: np.dtype | type | str, shape: tuple[int, ...], offset: int
    ) -> np.ndarray:
        """A zero-copy numpy view of `shape` elements of `dtype` starting at byte `offset`."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if offset < 0 or offset + nbytes > self.size:
            raise ValueError(
                f"view of {nbytes} bytes at offset {offset} exceeds segment {self.name!r} "
                f"of {self.size} bytes"
            )
        # frombuffer keeps a buffer export on the mmap (np.ndarray(buffer=...) does not), so
        # the mapping cannot be closed under a live view, which would crash on access.
        count = nbytes // dt.itemsize
        return np.frombuffer(self.buffer, dtype=dt, count=count, offset=offset).reshape(shape)

    def close(self) -> None:
        """Unmap if no numpy view is alive; otherwise the mapping goes with the last view."""
        if self._mmap is None:
            return
        # With numpy views still alive the GC unmaps when they die; the name is unaffected.
        with contextlib.suppress(BufferError):
            self._mmap.close()
        self._mmap = None


def _unlink_names(names: list[str]) -> None:
    while names:
        name = names.pop()
        with contextlib.suppress(FileNotFoundError):
            _posixshmem.shm_unlink("/" + name)


class SegmentOwner:
    """Creates a run's segments and unlinks all of them, once, from the creating process.

    Unlinking also happens at interpreter exit and when the owner is garbage collected, but
    only in the process that created the owner (a forked copy never unlinks).
    """

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or f"{NAME_ROOT}{os.getpid()}_{secrets.token_hex(3)}"
        if not self.prefix.startswith(NAME_ROOT):
            raise ValueError(f"segment prefix must start with {NAME_ROOT!r}, got {self.prefix!r}")
        self._pid = os.getpid()
        self._names: list[str] = []
        self._segments: list[Segment] = []
        self._finalizer = weakref.finalize(self, _unlink_if_owner, self._pid, self._names)

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def create(self, purpose: str, size: int, *, prefault: bool = True) -> Segment:
        """Create `<prefix>_<purpose>` of `size` bytes; `prefault` touches every page now."""
        if not _PURPOSE_RE.match(purpose):
            raise ValueError(f"segment purpose must be 1-8 of [a-z0-9], got {purpose!r}")
        if size <= 0:
            raise ValueError(f"segment size must be positive, got {size}")
        name = f"{self.prefix}_{purpose}"
        if name in self._names:
            raise ValueError(f"segment {name!r} already exists in this run")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
        self._names.append(name)  # registered before anything else can fail: unlink covers it
        try:
            os.ftruncate(fd, size)
        except OSError:
            os.close(fd)
            raise
        seg = Segment(name, size, fd)
        if prefault:
            # First touch of fresh shared pages is several times slower than a warm copy.
            np.frombuffer(seg.buffer, dtype=np.uint8)[:] = 0
        self._segments.append(seg)
        return seg

    def unlink_all(self) -> None:
        """Remove every segment name of this run (mappings stay valid until unmapped)."""
        if os.getpid() != self._pid:
            return
        for seg in self._segments:
            seg.close()
        self._segments.clear()
        _unlink_names(self._names)


def _unlink_if_owner(pid: int, names: list[str]) -> None:
    if os.getpid() == pid:
        _unlink_names(names)


def list_segments(prefix: str = NAME_ROOT) -> list[str]:
    """Names in /dev/shm that start with `prefix` (Linux; empty where /dev/shm is absent)."""
    if not SHM_DIR.is_dir():
        return []
    return sorted(p.name for p in SHM_DIR.iterdir() if p.name.startswith(prefix))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def sweep_stale_segments() -> list[str]:
    """Unlink unilab segments whose owner process no longer exists; returns their names.

    An owner killed with SIGKILL cannot clean up; the next run on the machine does. Only
    names of the ``unilab_<pid>_`` form whose pid is dead are touched.
    """
    removed = []
    for name in list_segments():
        match = _NAME_RE.match(name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        try:
            _posixshmem.shm_unlink("/" + name)
            removed.append(name)
        except FileNotFoundError:
            pass
    return removed
