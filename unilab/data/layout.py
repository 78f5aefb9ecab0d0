"""On-disk layout of an episode store, its root metadata (schema + commit marker) and the
writer lock.

    <store>/zarr.json                 root zarr v3 group; attributes["unilab_episode_store"]
                                      holds format version, schema, enums and the commit
                                      marker {frames, episodes, seq}
    <store>/<field>/...               one zarr array per schema field, (N, *shape) chunked on N
    <store>/episode_index/start       int64 (E,)  first frame of each episode
    <store>/episode_index/length      int64 (E,)  frames in each episode
    <store>/episode_index/meta        string (E,) EpisodeMeta as JSON

The root zarr.json is written by this module (temp file + fsync + os.replace + directory
fsync), never through zarr, so replacing it is the single atomic commit of an append.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unilab.data.errors import NotAStoreError, StoreLockedError

FORMAT_VERSION = 1
ATTR_KEY = "unilab_episode_store"
ROOT_META = "zarr.json"
INDEX_GROUP = "episode_index"
INDEX_FIELDS = {"start": "int64", "length": "int64", "meta": "str"}
INDEX_CHUNK = 4096
TEMP_SUFFIXES = (".partial", ".unilab-tmp")
"""zarr's LocalStore writes `<key>.<uuid>.partial` then renames; we write `*.unilab-tmp`.
A process killed between the two leaves one behind; repair removes them."""

EXPECTED = (
    "an episode store: a directory whose zarr.json is a zarr v3 group with the "
    f"'{ATTR_KEY}' attribute (create one with EpisodeStore.create)"
)


@dataclass(frozen=True)
class Commit:
    """The commit marker: frames [0, frames) and episodes [0, episodes) are readable."""

    frames: int
    episodes: int
    seq: int

    def to_json(self) -> dict[str, int]:
        return {"frames": self.frames, "episodes": self.episodes, "seq": self.seq}


def read_root(path: Path) -> dict[str, Any]:
    """The store's root attribute document; NotAStoreError names the path otherwise."""
    meta = path / ROOT_META
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise NotAStoreError(f"{path} {what}; expected {EXPECTED}")
    try:
        doc = json.loads(meta.read_text())
    except FileNotFoundError:
        raise NotAStoreError(f"{path} has no {ROOT_META}; expected {EXPECTED}") from None
    except (OSError, ValueError) as exc:
        raise NotAStoreError(f"{meta} cannot be read as JSON ({exc}); expected {EXPECTED}") from exc
    attrs = doc.get("attributes", {}) if isinstance(doc, dict) else {}
    root = attrs.get(ATTR_KEY) if isinstance(attrs, dict) else None
    if doc.get("node_type") != "group" or not isinstance(root, dict):
        raise NotAStoreError(f"{path} is not an episode store; expected {EXPECTED}")
    if root.get("format_version") != FORMAT_VERSION:
        raise NotAStoreError(
            f"{path} has episode-store format {root.get('format_version')!r}; this unilab "
            f"reads format {FORMAT_VERSION}"
        )
    return root


def read_commit(root: dict[str, Any]) -> Commit:
    c = root["commit"]
    return Commit(int(c["frames"]), int(c["episodes"]), int(c["seq"]))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(target: Path, doc: Any) -> None:
    """Write `doc` to `target` so that readers see the old file or the new one, never a
    mix, and the new one survives power loss once this returns."""
    tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex}{TEMP_SUFFIXES[1]}")
    data = json.dumps(doc, indent=1, sort_keys=True).encode()
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_dir(target.parent)


def write_root(path: Path, root: dict[str, Any]) -> None:
    """Replace the root group metadata (a valid zarr v3 group document) atomically."""
    doc = {"zarr_format": 3, "node_type": "group", "attributes": {ATTR_KEY: root}}
    atomic_write_json(path / ROOT_META, doc)


class WriterLock:
    """An exclusive flock on the store directory: one writer at a time. The kernel drops it
    when the holder dies, so a SIGKILLed writer never leaves a stale lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise StoreLockedError(
                f"{path} is open for writing by another process; open it with mode 'r' to "
                "read, or wait for the writer to close it"
            ) from None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def temp_files(path: Path) -> list[Path]:
    """Leftover temporary files of interrupted writes anywhere in the store."""
    found = []
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            if name.endswith(TEMP_SUFFIXES):
                found.append(Path(dirpath) / name)
    return sorted(found)
