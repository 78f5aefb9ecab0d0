"""Shared pieces of the benchmarks: the machine description, repeated timing, the table and
the JSON file. Every benchmark prints a table and writes JSON with `machine` in it."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from unilab.utils.atomic import atomic_write_text

T = TypeVar("T")

DEFAULT_PACKAGES = ("numpy", "mujoco", "gymnasium", "torch")


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, else what platform reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """Cores this process may run on (affinity), which can be fewer than the machine has."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def machine_info(packages: Iterable[str] = DEFAULT_PACKAGES) -> dict[str, Any]:
    """What a reader needs to compare numbers across machines."""
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": versions,
        "load_average_at_start": list(load) if load else None,
        "time_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """best (max), median and every run of a rate measured several times."""
    return {
        "best": max(values),
        "median": statistics.median(values),
        "runs": [round(v, 1) for v in values],
    }


def interleaved(runners: dict[str, Callable[[], T]], repeats: int) -> dict[str, list[T]]:
    """Run each runner once per round, `repeats` rounds, so that a burst of load on a shared
    machine hits every runner alike rather than one of them."""
    results: dict[str, list[T]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            results[name].append(run())
    return results


class Clock:
    """Wall and CPU time of one measured section; CPU time is this process's (all of its
    threads, no child processes), which a busy shared machine distorts far less."""

    def __enter__(self) -> Clock:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu

    def rates(self, count: int) -> tuple[float, float]:
        """count per wall second and per CPU second."""
        return count / self.wall, count / max(self.cpu, 1e-9)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """A plain aligned text table; floats get thousands separators and no decimals."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
        return "" if value is None else str(value)

    text = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in text)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in text:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def write_json(path: str | Path, data: dict[str, Any]) -> Path:
    """Write `data` as indented JSON (numpy scalars become plain numbers); returns the path."""
    out = Path(path)
    atomic_write_text(out, json.dumps(data, indent=2, default=_plain) + "\n")
    return out


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    if hasattr(value, "tolist"):  # numpy array
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def run_seed(run: Path, default: int) -> int:
    """The run's `run.seed` from its saved config (`default` where it has none)."""
    from omegaconf import OmegaConf

    config = run / "config.yaml"
    if not config.is_file():
        return default
    seed = OmegaConf.select(OmegaConf.load(config), "run.seed")
    return default if seed is None else int(seed)
