"""Name -> entry registries for tasks, algorithms and robots, filled on first lookup.

A registry knows the package whose import registers its entries (`package=`) and imports it
the first time anyone looks a name up, so no caller writes `import unilab.tasks  # registers`.
This module imports nothing from unilab: it sits at the bottom of the layers, and the
config layer (`unilab.config.compose`) looks tasks and algorithms up through `TASKS` and
`ALGORITHMS` below without importing the packages that define them
(docs/decisions/0021-lazy-registries-and-compose-layer.md).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not registered; the message lists what is."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want plain text.
        return str(self.args[0])


class Registry(Generic[T]):
    """Maps names to entries. `kind` ("task", "algorithm", ...) only shapes error messages;
    `package` (one name, or several) is imported on the first lookup (registering does not
    trigger it)."""

    def __init__(self, kind: str, package: str | tuple[str, ...] | None = None) -> None:
        self.kind = kind
        self.package = (package,) if isinstance(package, str) else package
        self._entries: dict[str, T] = {}
        self._state = "empty" if package else "loaded"  # empty -> loading -> loaded

    def _load(self) -> None:
        if self._state != "empty" or self.package is None:
            return  # loaded, or a lookup made while the package itself is importing
        self._state = "loading"
        try:
            for name in self.package:
                importlib.import_module(name)
        except BaseException:
            self._state = "empty"  # a failed import is retried (and raises again) next time
            raise
        self._state = "loaded"

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(entry: T) -> T:
            self.add(name, entry)
            return entry

        return decorator

    def add(self, name: str, entry: T) -> None:
        if name in self._entries and self._entries[name] is not entry:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry

    def get(self, name: str) -> T:
        self._load()
        if name not in self._entries:
            raise UnknownNameError(self.unknown_message(name))
        return self._entries[name]

    def unknown_message(self, name: str) -> str:
        known = self.names()
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        return f"unknown {self.kind} {name!r}.{hint} Registered: {', '.join(known) or '(none)'}."

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def items(self) -> list[tuple[str, T]]:
        return [(n, self._entries[n]) for n in self.names()]


class ConfiguredEntry(Protocol):
    """What the config layer reads from a registered task or algorithm."""

    @property
    def config_cls(self) -> type[Any]:
        """The config dataclass composed into `Config.task` / `Config.algo`."""

    @property
    def description(self) -> str: ...

    def check_config(self, cfg: Any) -> list[str]:
        """Problems the registered class sees in a composed config section (e.g. an unknown
        reward term), one readable line each, as `<section>.<key>=...` messages."""


class TaskEntryView(ConfiguredEntry, Protocol):
    @property
    def default_algo(self) -> str: ...


# The objects live here, typed by what compose reads; `unilab.tasks.registry` and
# `unilab.algos.registry` re-export them with their full entry types and fill them.
TASKS: Registry[TaskEntryView] = Registry("task", package="unilab.tasks")
# The world model trains on the offline loop like an algorithm, from the tools layer.
ALGORITHMS: Registry[ConfiguredEntry] = Registry(
    "algorithm", package=("unilab.algos", "unilab.worldmodel")
)
