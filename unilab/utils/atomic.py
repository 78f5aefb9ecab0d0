"""Files a user relies on are written atomically: a temp file in the same directory, fsync,
rename over the final name, fsync of the directory. A crash leaves the old file or the new
one, never a torn one; what it can leave is a `*.tmp` file, which `remove_leftovers` cleans.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

TMP_SUFFIX = ".tmp"


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path next to `path`; when the block ends cleanly, the file written there
    is fsynced and renamed to `path`. On an exception the temp file is removed."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_pid(name: str) -> int | None:
    """The pid a temp name carries (`x.<pid>.tmp`, `.exporting-<pid>`), if any."""
    stem = name.removesuffix(TMP_SUFFIX)
    tail = stem.rsplit("-", 1)[-1] if name.startswith(".exporting-") else stem.rsplit(".", 1)[-1]
    return int(tail) if tail.isdigit() else None


def remove_leftovers(directory: Path, recursive: bool = True) -> list[Path]:
    """Delete `*.tmp` files and `.exporting-*` folders a crashed writer left in `directory`
    (those of a writer that is still running are kept). Returns what was removed."""
    if not directory.is_dir():
        return []
    removed: list[Path] = []
    candidates = directory.rglob("*") if recursive else directory.iterdir()
    for path in sorted(candidates, reverse=True):  # children before their folders
        name = path.name
        if not (name.endswith(TMP_SUFFIX) or ".tmp." in name or name.startswith(".exporting-")):
            continue
        pid = _owner_pid(name)
        if pid is not None and pid != os.getpid() and _pid_alive(pid):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed
