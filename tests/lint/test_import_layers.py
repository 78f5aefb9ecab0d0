"""The import-layer check that `make lint` runs (tools/check_layers.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "check_layers.py"


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), str(root)], capture_output=True, text=True, timeout=60
    )


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_repository_imports_point_down() -> None:
    done = _run(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "import layers ok" in done.stdout
    assert "lint:" in (ROOT / "Makefile").read_text()
    assert "tools/check_layers.py" in (ROOT / "Makefile").read_text()


def test_a_wrong_way_import_inside_a_function_fails(tmp_path: Path) -> None:
    bad = "def f():\n    from unilab.train.runner import Runner  # config must not see train\n"
    root = _tree(
        tmp_path,
        {
            "unilab/__init__.py": "",
            "unilab/config/__init__.py": "",
            "unilab/config/bad.py": bad,
            "unilab/train/__init__.py": "",
            "unilab/train/runner.py": "import unilab.config.bad\n",  # down: fine
        },
    )
    done = _run(root)
    assert done.returncode == 1, done.stdout
    lines = [line for line in done.stdout.splitlines() if "imports" in line]
    assert len(lines) == 1, done.stdout
    assert (
        "unilab/config/bad.py:2: unilab.config.bad (config) imports unilab.train.runner (train)"
        in lines[0]
    )


def test_type_checking_imports_and_linked_folders_count(tmp_path: Path) -> None:
    robots = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from unilab.deploy.sim_robot import SimRobot\n"
    )
    root = _tree(
        tmp_path,
        {
            "unilab/__init__.py": "",
            "robots/__init__.py": "",
            "robots/interface.py": robots,  # read as unilab.robots.interface
            "unilab/deploy/__init__.py": "",
            "unilab/deploy/sim_robot.py": "from unilab.robots.interface import *\n",
        },
    )
    done = _run(root)
    assert done.returncode == 1
    assert "unilab.robots.interface (robots) imports unilab.deploy.sim_robot (tools)" in done.stdout


def test_a_module_outside_every_layer_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"unilab/__init__.py": "", "unilab/newthing/mod.py": "x = 1\n"})
    done = _run(root)
    assert done.returncode == 1 and "is in no layer" in done.stdout
