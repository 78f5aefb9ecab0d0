"""`BackgroundAppender`: an episode store's appends, run on one background thread.

A commit costs a fixed few tens of ms (docs/decisions/0005), which a training loop should
not wait for. `EpisodeWriter` hands finished episodes to `append_episodes`; this class
queues them and returns at once, and a single thread appends them in order (the store
still has one writer). At most `max_pending` groups wait, so memory stays bounded and a
disk that cannot keep up slows the caller instead of growing the queue. An error on the
thread is raised at the next call (or at `close`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence

from unilab.data.store import EpisodeInput, EpisodeStore


class BackgroundAppender:
    """Stands in for `store` where only `schema` and `append_episodes` are used."""

    def __init__(self, store: EpisodeStore, max_pending: int = 2) -> None:
        self.store = store
        self.schema = store.schema
        self._next_id = len(store)
        self._queue: queue.Queue[list[EpisodeInput] | None] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="unilab-append", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            episodes = self._queue.get()
            if episodes is None:
                return
            if self._error is None:
                try:
                    self.store.append_episodes(episodes)
                except BaseException as exc:  # re-raised in the caller's thread
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"appending to {self.store.path} failed: {error}") from error

    def append_episodes(self, episodes: Sequence[EpisodeInput]) -> list[int]:
        """Queue `episodes` for one commit; returns the indices they will have."""
        self._raise()
        if not self._thread.is_alive():
            raise RuntimeError("the appender is closed")
        ids = list(range(self._next_id, self._next_id + len(episodes)))
        self._next_id += len(episodes)
        self._queue.put(list(episodes))
        return ids

    def close(self) -> None:
        """Wait for every queued append, stop the thread, raise a pending error."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise()
