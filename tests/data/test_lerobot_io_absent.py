"""Without the `lerobot` package, the LeRobot interop says how to get it (main environment)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from unilab.data.lerobot_io import (
    LeRobotUnavailableError,
    export_to_lerobot,
    import_from_lerobot,
)


def test_missing_lerobot_names_the_environment_to_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry makes `import lerobot...` fail as it does where lerobot is not installed.
    for name in ("lerobot", "lerobot.datasets", "lerobot.datasets.lerobot_dataset"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(LeRobotUnavailableError, match="make test-lerobot") as err:
        export_to_lerobot(tmp_path / "s.zarr", tmp_path / "out", "u/d")
    assert "unilab[lerobot]" in str(err.value)
    with pytest.raises(ImportError, match="make test-lerobot"):
        import_from_lerobot(tmp_path, tmp_path / "s.zarr")
    assert not (tmp_path / "out").exists()
