"""Named POSIX shared-memory segments with one owner.

The learner (parent) process creates every segment through a `SegmentOwner` and is the only
process that ever unlinks one. Workers `Segment.attach` by name. We call `shm_open` directly
instead of `multiprocessing.shared_memory.SharedMemory` because on Python < 3.13 the latter
registers every attach with a resource tracker that may unlink the segment when the attaching
process exits (cpython issue 82300); see docs/decisions/0004-shared-memory-runtime.md.

Names look like ``unilab_<uid>_<pid>_<run id>_<purpose>``, uid and pid in base 36 and the run
id 6 hex digits (short: macOS allows 31 characters), so a run's segments can be listed in
/dev/shm and carry whose they are. The owner holds a shared `flock` on each segment it
created for as long as it lives (the kernel drops it when the process dies, however it
dies), so `sweep_stale_segments` removes only segments of this user whose owner is dead,
never another user's, never a live run's (also one in another PID namespace), and never
fails on a segment it may not touch. A SIGTERM that arrives after an owner created segments
but before the program installed its own handler ends the process through SystemExit, so
the segments are unlinked at exit (see `_exit_cleanly_on_sigterm`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import re
import secrets
import signal
import sys
import threading
import weakref
from pathlib import Path
from types import FrameType

import numpy as np

if sys.platform == "win32":  # pragma: no cover - the runtime targets Linux (and macOS).
    raise ImportError("unilab.runtime needs POSIX shared memory (Linux or macOS)")

import _posixshmem

_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux only; elsewhere pages fault lazily
NAME_ROOT = "unilab_"
SHM_DIR = Path("/dev/shm")
MAX_NAME_CHARS = 31  # macOS (PSHMNAMLEN); Linux allows 255
# unilab_<uid36>_<pid36>_<run>_<purpose>; the format before round 2 had no uid field.
_NAME_RE = re.compile(
    r"^unilab_(?P<uid>[0-9a-z]+)_(?P<pid>[0-9a-z]+)_(?P<run>[0-9a-z]+)_[a-z0-9]+$"
)
_OLD_NAME_RE = re.compile(r"^unilab_(?P<pid>\d+)_[0-9a-f]+_[a-z0-9]+$")
_PURPOSE_RE = re.compile(r"^[a-z0-9]{1,8}$")
_RUN_ID_RE = re.compile(r"^[0-9a-z]{1,8}$")
log = logging.getLogger("unilab.runtime")


def base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def owner_prefix(pid: int | None = None, uid: int | None = None) -> str:
    """``unilab_<uid>_<pid>_``: the start of every segment name a process of a user makes."""
    uid = os.getuid() if uid is None else uid
    pid = os.getpid() if pid is None else pid
    return f"{NAME_ROOT}{base36(uid)}_{base36(pid)}_"


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

    def __init__(self, prefix: str | None = None, *, run_id: str | None = None) -> None:
        """`run_id` (1-8 of [0-9a-z]; default: 6 random hex digits) names the run in every
        segment name; `prefix` replaces the whole ``unilab_<uid>_<pid>_<run id>`` part."""
        if run_id is not None and not _RUN_ID_RE.match(run_id):
            raise ValueError(f"run_id must be 1-8 of [0-9a-z], got {run_id!r}")
        self.prefix = prefix or owner_prefix() + (run_id or secrets.token_hex(3))
        if not self.prefix.startswith(NAME_ROOT):
            raise ValueError(f"segment prefix must start with {NAME_ROOT!r}, got {self.prefix!r}")
        self._pid = os.getpid()
        self._names: list[str] = []
        self._lock_fds: list[int] = []
        self._segments: list[Segment] = []
        self._finalizer = weakref.finalize(
            self, _unlink_if_owner, self._pid, self._names, self._lock_fds
        )

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
        if sys.platform == "darwin" and len(name) > MAX_NAME_CHARS:
            raise ValueError(f"segment name {name!r} exceeds macOS's {MAX_NAME_CHARS} characters")
        _exit_cleanly_on_sigterm()
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
        self._names.append(name)  # registered before anything else can fail: unlink covers it
        try:
            # Held while this process lives: the sweep of another run sees the segment is live.
            lock_fd = os.dup(fd)
            self._lock_fds.append(lock_fd)
            # (where shm has no flock, e.g. macOS, there is no /dev/shm sweep either)
            with contextlib.suppress(OSError):
                fcntl.flock(lock_fd, fcntl.LOCK_SH)
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
        _close_fds(self._lock_fds)


def _close_fds(fds: list[int]) -> None:
    while fds:
        with contextlib.suppress(OSError):
            os.close(fds.pop())


def _unlink_if_owner(pid: int, names: list[str], lock_fds: list[int]) -> None:
    if os.getpid() == pid:
        _unlink_names(names)
        _close_fds(lock_fds)


_sigterm_guard_installed = False


def _exit_cleanly_on_sigterm() -> None:
    """Until the program installs its own SIGTERM handler, turn SIGTERM into SystemExit(143).

    SIGTERM's default action ends the process at once, skipping atexit and finalizers, so
    segments created before the learner installs its handler (the window while a run sets
    up) would stay in /dev/shm. A handler that raises SystemExit unwinds instead, and the
    owner unlinks at exit. Only when SIGTERM still has its default action, and only from the
    main thread (the only one that may set handlers); a handler installed later replaces
    this one.
    """
    global _sigterm_guard_installed
    if _sigterm_guard_installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _sigterm_to_system_exit)
    _sigterm_guard_installed = True


def _sigterm_to_system_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


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


def _stale_owner_pid(name: str, uid: int) -> int | None:
    """The owner pid named in a segment name of user `uid`, else None (not ours / unknown)."""
    match = _NAME_RE.match(name)
    if match is not None:
        if match.group("uid") != base36(uid):
            return None
        return int(match.group("pid"), 36)
    old = _OLD_NAME_RE.match(name)
    return int(old.group("pid")) if old is not None else None


def sweep_stale_segments() -> list[str]:
    """Unlink unilab segments of this user whose owner is dead; returns their names.

    An owner killed with SIGKILL cannot clean up; the next run on the machine does. A
    segment is removed only when all of these hold: its name carries this user's uid (or
    has the older ``unilab_<pid>_`` form), the file belongs to this user, its owner pid is
    not alive, and no process holds its flock (a live owner always does, whatever PID
    namespace it runs in). Segments of other users or of live runs, and any segment that
    cannot be opened or unlinked (PermissionError), are left alone.
    """
    uid = os.getuid()
    removed = []
    for name in list_segments():
        pid = _stale_owner_pid(name, uid)
        if pid is None or _pid_alive(pid):
            continue
        try:
            if removed_stale(name, uid):
                removed.append(name)
        except OSError as exc:  # PermissionError, a race with another sweep, ...
            log.debug("not sweeping /dev/shm/%s: %s", name, exc)
    return removed


def removed_stale(name: str, uid: int) -> bool:
    """Unlink `name` if it belongs to `uid` and nobody holds its lock; True if unlinked."""
    try:
        fd = os.open(SHM_DIR / name, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    try:
        if os.fstat(fd).st_uid != uid:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live owner holds it
        try:
            _posixshmem.shm_unlink("/" + name)
        except FileNotFoundError:
            return False
        return True
    finally:
        os.close(fd)
