"""Tests that need the `lerobot` package: they run in .venv-lerobot through `make test-lerobot`
and are not collected by the default test run (pyproject: --ignore=tests/data_lerobot)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too, so the folder also runs on its own before pyproject lists it.
    config.addinivalue_line("markers", "lerobot: needs the lerobot environment (make test-lerobot)")
    # Noise from lerobot 0.4.4's own stack: `datasets` turns (1,)-shaped scalar features into
    # floats with float(array) (a numpy deprecation), and lerobot's statistics cast bool
    # columns to uint8 with a warning each episode.
    config.addinivalue_line(
        "filterwarnings", "ignore:Conversion of an array with ndim > 0:DeprecationWarning"
    )
    config.addinivalue_line("filterwarnings", "ignore:Converting input from bool:RuntimeWarning")
