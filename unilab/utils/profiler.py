"""One small profiler: named sections, total time and count each, reported at the end.

`with prof.section("update"): ...` costs two perf_counter calls; use it around whole
phases (a chunk, an update), not inside per-env or per-sample loops.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Profiler:
    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._start = time.perf_counter()

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + seconds
        self.counts[name] = self.counts.get(name, 0) + 1

    def merge(self, totals: dict[str, float], prefix: str = "") -> None:
        for name, seconds in totals.items():
            self.add(prefix + name, seconds)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def snapshot(self) -> dict[str, float]:
        return dict(self.totals)

    def report(self) -> str:
        wall = max(self.elapsed, 1e-9)
        rows = sorted(self.totals.items(), key=lambda kv: -kv[1])
        width = max((len(n) for n, _ in rows), default=8)
        lines = [f"{'section':<{width}}  {'total s':>9}  {'calls':>7}  {'% wall':>6}"]
        for name, total in rows:
            lines.append(
                f"{name:<{width}}  {total:9.3f}  {self.counts[name]:7d}  {100 * total / wall:6.1f}"
            )
        return "\n".join(lines)
