"""Replace a directory by a complete new one without a moment where neither exists.

Used where a finished result takes the place of an old one (a rebuilt episode store after
`repair`, a LeRobot export with `overwrite=True`): the new directory is built beside the
target, and only then swapped in. On Linux the swap is one `renameat2(RENAME_EXCHANGE)`
call, so a crash leaves either the old or the new directory at `target`, never none and
never a mix. Elsewhere (or on a filesystem without RENAME_EXCHANGE) two renames are used:
a crash between them leaves the old directory at its backup name and the new one beside
it, both complete, and the error names both.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import sys
import uuid
from pathlib import Path

from unilab.data.layout import fsync_dir

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # glibc < 2.28, or another libc
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2()


def exchange_dirs(a: Path, b: Path) -> bool:
    """Atomically swap the directories `a` and `b` (both must exist). False when the
    platform or filesystem cannot; nothing has changed then."""
    if _RENAMEAT2 is None:
        return False
    rc = _RENAMEAT2(  # type: ignore[operator]
        _AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE
    )
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(err, f"renameat2({a}, {b}, RENAME_EXCHANGE): {os.strerror(err)}")


def replace_dir(new: Path, target: Path, *, backup: Path | None = None) -> Path | None:
    """Put the complete directory `new` at `target`.

    When `target` exists, the old directory ends up at `backup` (returned), or is deleted
    after the swap when `backup` is None. `new` and `target` must be on one filesystem
    (build `new` as a sibling of `target`).
    """
    if not new.is_dir():
        raise FileNotFoundError(f"{new} is not a directory")
    if not target.exists():
        os.rename(new, target)
        fsync_dir(target.parent)
        return None
    old = (
        backup
        if backup is not None
        else target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
    )
    if old.exists():
        raise FileExistsError(f"{old} exists; not overwriting it")
    old.parent.mkdir(parents=True, exist_ok=True)
    if exchange_dirs(new, target):
        os.rename(new, old)  # `new` now holds the old directory
    else:
        os.rename(target, old)
        try:
            os.rename(new, target)
        except OSError as exc:
            raise OSError(
                f"could not move {new} to {target} ({exc}); the previous directory is at {old}"
            ) from exc
    fsync_dir(target.parent)
    if backup is None:
        shutil.rmtree(old)
        return None
    return old
