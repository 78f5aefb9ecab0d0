"""Throughput of a collection (env steps and images per CPU second of all its processes,
and per wall second) and resident-memory samples, read from /proc (Linux).

Two windows: the steady one opens once every worker has delivered a chunk (start-up left
out); the whole run's opens at the first chunk and is reported only when the steady one
holds no steps (a collection too short for it)."""

from __future__ import annotations

import os
import time
from pathlib import Path


class ThroughputMeter:
    """Throughput over the steady part of a run (CPU of this process and the workers) and
    resident-memory samples, from /proc (Linux)."""

    def __init__(self, cameras: int, rss_every_s: float) -> None:
        self.cameras = max(1, cameras)
        self.rss_every_s = rss_every_s
        self.started = False
        self._t0 = self._cpu0 = self._main0 = 0.0
        self._steps0 = 0
        self._t1 = self._cpu1 = self._main1 = 0.0
        self._steps1 = 0
        self._first: tuple[float, float, float, int] | None = None
        """(wall, cpu, main cpu, steps) at the first chunk: the whole run's window, used when
        the run ends before every worker delivered (a tiny collection)."""
        self._next_sample = 0.0
        self._rate_t = time.perf_counter()
        self._rate_steps = 0
        self._rate = 0.0
        self.rss: list[dict[str, float]] = []

    @staticmethod
    def _cpu(pids: list[int | None]) -> float:
        total = time.process_time()
        ticks = os.sysconf("SC_CLK_TCK")
        for pid in pids:
            if pid is None:
                continue
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        return total

    @staticmethod
    def _rss_mib(pid: int | str) -> float:
        try:
            pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except OSError:
            return 0.0
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20

    def start(self, pids: list[int | None], steps: int) -> None:
        self.started = True
        self._t0, self._cpu0, self._steps0 = time.perf_counter(), self._cpu(pids), steps
        self._main0 = time.process_time()

    @property
    def opened(self) -> bool:
        """The first chunk has arrived (the whole run's window is open)."""
        return self._first is not None

    def open(self, pids: list[int | None], steps: int) -> None:
        """Open the whole run's window at the first chunk."""
        self._first = (time.perf_counter(), self._cpu(pids), time.process_time(), steps)

    def stop(self, pids: list[int | None], steps: int) -> None:
        if self.started or self._first is not None:
            self._t1, self._cpu1, self._steps1 = time.perf_counter(), self._cpu(pids), steps
            self._main1 = time.process_time()

    def rate(self) -> float:
        return self._rate

    def sample(self, pids: list[int | None], steps: int, frames: int) -> None:
        now = time.perf_counter()
        if now - self._rate_t >= 1.0:
            self._rate = (steps - self._rate_steps) / (now - self._rate_t)
            self._rate_t, self._rate_steps = now, steps
        if now < self._next_sample:
            return
        self._next_sample = now + self.rss_every_s
        workers = sum(self._rss_mib(p) for p in pids if p is not None)
        self.rss.append(
            {"env_steps": steps, "main_mib": self._rss_mib("self"), "workers_mib": workers}
        )

    def steady(self) -> dict[str, float]:
        """Throughput once every worker delivered; over the whole run (`whole_run` 1) when
        that window holds no steps."""
        t0, cpu0, main0, steps0 = self._t0, self._cpu0, self._main0, self._steps0
        whole = not self.started or self._steps1 - steps0 <= 0
        if whole:
            if self._first is None:
                return {}
            t0, cpu0, main0, steps0 = self._first
        steps = self._steps1 - steps0
        cpu, wall = self._cpu1 - cpu0, self._t1 - t0
        if steps <= 0 or cpu <= 0 or wall <= 0:
            return {}
        return {
            "env_steps": steps,
            "images": steps * self.cameras,
            "cpu_s": cpu,
            "main_cpu_s": self._main1 - main0,
            "wall_s": wall,
            "whole_run": float(whole),
            "env_steps_per_cpu_s": steps / cpu,
            "images_per_cpu_s": steps * self.cameras / cpu,
            "env_steps_per_wall_s": steps / wall,
            "images_per_wall_s": steps * self.cameras / wall,
        }
