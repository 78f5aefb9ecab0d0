"""The fleet server's event log: one JSON object per line for every alert raised or
cleared, every operator action and its acknowledgement, robots joining and getting lost.

Each line is flushed and fsync-ed before `append` returns: the log is what an incident
review reads after a crash, and events are rare (a few per minute), so durability costs
nothing noticeable.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any


class EventLog:
    """Append-only JSONL; safe to call from the link thread and the web thread."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        self._lock = threading.Lock()
        self.count = 0

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"time": time.time(), "kind": kind, **fields}
        line = json.dumps(event, sort_keys=True, default=str)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self.count += 1
        return event

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every event in a log, oldest first (a torn last line from a crash is skipped)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
