"""The one error type bad configuration raises; the CLI prints it without a traceback."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad configuration input. `problems` holds one readable line per problem."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__(self.message())

    def message(self) -> str:
        if len(self.problems) == 1:
            return self.problems[0]
        return "invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems)
