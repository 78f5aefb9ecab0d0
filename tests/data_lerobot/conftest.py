"""Tests that need the `lerobot` package. They run in .venv-lerobot, through
`make test-lerobot` (`pytest -m lerobot tests/data_lerobot`), and nowhere else: a run whose
mark expression does not ask for `lerobot` does not collect this folder at all (the default
run's `-m 'not slow'` included), so the main environment never imports lerobot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

_ASKS_FOR_LEROBOT = re.compile(r"(?<!not )\blerobot\b")


def pytest_configure(config: pytest.Config) -> None:
    # Registered here as well as in pyproject, so that --strict-markers accepts it either way.
    config.addinivalue_line("markers", "lerobot: needs the lerobot environment (make test-lerobot)")
    # Noise from lerobot 0.4.4's own stack: `datasets` turns (1,)-shaped scalar features into
    # floats with float(array) (a numpy deprecation), and lerobot's statistics cast bool
    # columns to uint8 with a warning each episode.
    config.addinivalue_line(
        "filterwarnings", "ignore:Conversion of an array with ndim > 0:DeprecationWarning"
    )
    config.addinivalue_line("filterwarnings", "ignore:Converting input from bool:RuntimeWarning")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Collect this folder's files only when the run selects `-m lerobot`."""
    markexpr = str(config.getoption("markexpr") or "")
    return None if _ASKS_FOR_LEROBOT.search(markexpr) else True
