"""Registries load their package on first lookup, so the config layer composes without
importing tasks or algorithms; `check_task_builds` turns a task's refusal into a ConfigError."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from unilab.config import ConfigError, compose
from unilab.registry import Registry, UnknownNameError
from unilab.tasks.registry import check_task_builds

FRESH = textwrap.dedent(
    """
    import sys
    from unilab.config.compose import compose
    from unilab.registry import ALGORITHMS, TASKS
    loaded = lambda: sorted(m for m in ("unilab.tasks", "unilab.algos", "torch") if m in sys.modules)
    print(loaded())
    print("cartpole_balance" in TASKS, loaded())
    cfg = compose(["task=arm_reach", "algo=sac"])
    print(cfg.task.name, cfg.algo.name, type(cfg.algo).__name__, loaded())
    """
)


def test_compose_imports_tasks_and_algorithms_only_when_it_looks_them_up() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, timeout=300, check=True
    ).stdout.splitlines()
    assert out == [
        "[]",
        "True ['unilab.tasks']",
        "arm_reach sac SACConfig ['torch', 'unilab.algos', 'unilab.tasks']",
    ]


def test_registry_imports_its_package_once_on_first_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry: Registry[int] = Registry("widget", package="widgets_pkg")
    monkeypatch.setitem(sys.modules, "widget_registry_holder", type(sys)("holder"))
    sys.modules["widget_registry_holder"].REGISTRY = registry  # type: ignore[attr-defined]
    pkg = tmp_path / "widgets_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import widget_registry_holder as h\n"
        "h.REGISTRY.add('gear', 1)\n"
        "assert 'gear' in h.REGISTRY  # a lookup while importing sees what is there so far\n"
        "h.REGISTRY.add('cog', 2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.add("early", 0)  # registering does not load the package
    assert "widgets_pkg" not in sys.modules
    assert registry.get("cog") == 2 and registry.names() == ["cog", "early", "gear"]
    with pytest.raises(UnknownNameError, match=r"unknown widget .cgo.\. Did you mean cog"):
        registry.get("cgo")
    sys.modules.pop("widgets_pkg", None)


def test_a_package_that_fails_to_import_raises_on_every_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_widgets.py").write_text("raise ImportError('no widgets today')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry: Registry[int] = Registry("widget", package="broken_widgets")
    for _ in range(2):
        with pytest.raises(ImportError, match="no widgets today"):
            registry.names()


def test_check_task_builds() -> None:
    cfg = compose(["task=arm_reach"])
    task = check_task_builds(cfg.task, cfg.sim)
    assert task.num_envs == 1 and "policy" in task.obs_dims
    bad = compose(["task=arm_reach", "task.tracking_sigma=0"])
    with pytest.raises(ConfigError, match=r"task .arm_reach.: tracking_sigma .* got 0\.0"):
        check_task_builds(bad.task, bad.sim)
