"""The learner's check of every chunk before it can reach an update.

A chunk is dropped (handed back unread, counted, and logged the first few times) when:

- **header**: the worker id does not own the slot; the generation is older than one already
  seen from that worker (a chunk of a replaced process arriving late); within a generation
  the sequence number is not the next one (duplicate, gap or reorder); the policy version
  is negative or newer than the newest the learner published;
- **data**: a float field holds NaN or ±inf (`NAN_ALLOWED` fields may hold NaN, never ±inf).
  Ring memory is NaN-poisoned when created, and with `runtime.debug_poison` also each time
  a worker takes a slot, so a float field a worker left unwritten is caught here too.
  (Integer and uint8 fields are not checked: 0xFF poison is a legal value for them.)

The first chunk of each generation may start at any sequence number (a worker restored
from a saved state continues its old count). A dropped chunk that is its worker's newest
still moves the expected sequence on, so one bad chunk, or one gap, costs that chunk only. Cost: one float64 sum per float field (exact
as a finiteness test for float32 data, which cannot overflow float64), a full `isfinite`
only when that sum is not finite.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np

from unilab.runtime.ring_layout import SlotHeader

log = logging.getLogger("unilab.runtime")

NAN_ALLOWED: frozenset[str] = frozenset({"episode_return", "episode_success"})
"""Fields that hold NaN by design (NaN where no episode ended)."""
LOGGED_VIOLATIONS = 10
"""Violations logged one by one; later ones are only counted."""


class ChunkCheck:
    """Per-worker stream state and the check. One per learner; `counts` says what was
    dropped (`bad_header`, `bad_data`) and how many chunks passed (`ok`)."""

    def __init__(
        self,
        num_workers: int,
        worker_of: Callable[[int], int] | None = None,
        *,
        nan_allowed: frozenset[str] = NAN_ALLOWED,
    ) -> None:
        self.num_workers = num_workers
        self._worker_of = worker_of  # slot -> owning worker (RingBuffer.worker_of)
        self.nan_allowed = nan_allowed
        self._generation = [-1] * num_workers
        self._next_seq = [0] * num_workers
        self.counts: Counter[str] = Counter()
        self.last_problem = ""

    def problem(
        self,
        slot: int,
        header: SlotHeader,
        views: Mapping[str, np.ndarray],
        newest_version: int,
    ) -> str | None:
        """Why the chunk in `slot` must not be learned from, or None (then the worker's
        stream state advances)."""
        why = self._header_problem(slot, header, newest_version) or self._data_problem(views)
        w = header.worker_id
        if self._moves_stream_on(slot, header):
            # Also for a dropped chunk: one bad chunk (or a gap) costs that chunk only.
            self._generation[w] = header.generation
            self._next_seq[w] = header.seq + 1
        if why is None:
            self.counts["ok"] += 1
            return None
        kind = "bad_header" if why.startswith("header") else "bad_data"
        self.counts[kind] += 1
        self.last_problem = why
        dropped = self.counts["bad_header"] + self.counts["bad_data"]
        if dropped <= LOGGED_VIOLATIONS:
            log.warning(
                "dropped the chunk in slot %d (worker %d, generation %d, seq %d): %s%s",
                slot,
                header.worker_id,
                header.generation,
                header.seq,
                why,
                "; later violations are only counted" if dropped == LOGGED_VIOLATIONS else "",
            )
        return why

    def accept(
        self, slot: int, header: SlotHeader, views: Mapping[str, np.ndarray], newest: int
    ) -> bool:
        return self.problem(slot, header, views, newest) is None

    def _moves_stream_on(self, slot: int, header: SlotHeader) -> bool:
        """The chunk is its worker's newest: right worker, current or newer generation, and
        a sequence number past the last one seen (not a duplicate or a late one)."""
        w = header.worker_id
        if not 0 <= w < self.num_workers or header.seq < 0:
            return False
        if self._worker_of is not None and self._worker_of(slot) != w:
            return False
        if header.generation != self._generation[w]:
            return header.generation > self._generation[w]
        return header.seq >= self._next_seq[w]

    def _header_problem(self, slot: int, header: SlotHeader, newest: int) -> str | None:
        w = header.worker_id
        if not 0 <= w < self.num_workers:
            return f"header names worker {w}; the run has {self.num_workers}"
        owner = self._worker_of(slot) if self._worker_of is not None else w
        if owner != w:
            return f"header names worker {w}, but slot {slot} belongs to worker {owner}"
        if header.generation < self._generation[w]:
            return (
                f"header generation {header.generation} is older than generation "
                f"{self._generation[w]} already seen from worker {w}"
            )
        if header.generation == self._generation[w] and header.seq != self._next_seq[w]:
            return f"header sequence {header.seq}; expected {self._next_seq[w]} next"
        if header.seq < 0:
            return f"header sequence {header.seq} is negative (never published)"
        if not 0 <= header.policy_version <= newest:
            return (
                f"header policy version {header.policy_version} is outside 0..{newest} "
                "(the versions published so far)"
            )
        return None

    def _data_problem(self, views: Mapping[str, np.ndarray]) -> str | None:
        for name, view in views.items():
            if view.dtype.kind == "f":
                total = view.sum(dtype=np.float64)
                if np.isfinite(total):
                    continue
                bad = np.isinf(view) if name in self.nan_allowed else ~np.isfinite(view)
                if bad.any():
                    where = tuple(int(i) for i in np.argwhere(bad)[0])
                    return (
                        f"field {name!r} holds {int(bad.sum())} non-finite value(s), the "
                        f"first at index {where}: {view[where]!r}"
                    )
        return None
