"""The presets in configs/: each composes, holds only what differs from the defaults (and
from the presets it names in `base:`), and cites only files that exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from unilab.config import ConfigError, compose
from unilab.config.compose import BASE_KEY, PRESET_DIR, base_path, list_presets
from unilab.registry import ALGORITHMS, TASKS

REPO = PRESET_DIR.resolve().parent  # configs/ is linked into the package
CITED = re.compile(r"[\w./-]+\.(?:py|json|yaml|md|png)\b")  # repo files, not MJCF assets


def _task_algo(name: str) -> tuple[str, str]:
    """configs/<task>/<algo>.yaml; a shared block (e.g. mjcf/ant) gets the task's default."""
    task, stem = name.split("/")
    return task, stem if stem in ALGORITHMS else TASKS.get(task).default_algo


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            items += _flatten(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def _value(cfg: Any, key: str) -> Any:
    node = OmegaConf.select(cfg, key)
    value = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node
    return list(value) if isinstance(value, tuple) else value


def repeated_values(name: str, tmp_path: Path) -> list[str]:
    """Keys of the preset whose value equals what they would be without the preset file."""
    path = PRESET_DIR / f"{name}.yaml"
    own = yaml.safe_load(path.read_text()) or {}
    bases = own.pop(BASE_KEY, [])
    bases = [bases] if isinstance(bases, str) else bases
    without = tmp_path / f"{name.replace('/', '_')}_without.yaml"
    without.write_text(yaml.safe_dump({BASE_KEY: [str(base_path(b, path)) for b in bases]}))
    task, algo = _task_algo(name)
    reference = OmegaConf.structured(compose([f"task={task}", f"algo={algo}", f"preset={without}"]))
    return [
        f"{name}: {key}={value!r} repeats the value it has anyway"
        for key, value in _flatten(own)
        if _value(reference, key) == value
    ]


def test_there_are_presets_for_every_task() -> None:
    tasks = {name.split("/")[0] for name in list_presets()}
    assert tasks == set(TASKS.names())


@pytest.mark.parametrize("name", list_presets())
def test_preset_composes_and_repeats_no_default(name: str, tmp_path: Path) -> None:
    task, algo = _task_algo(name)
    cfg = compose([f"task={task}", f"algo={algo}", f"preset={name}"])
    assert cfg.task.name == task and cfg.algo.name == algo
    assert repeated_values(name, tmp_path) == []


def test_the_check_finds_a_repeated_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    presets = tmp_path / "configs"
    (presets / "cartpole_balance").mkdir(parents=True)
    (presets / "cartpole_balance" / "ppo.yaml").write_text(
        "runtime:\n  num_workers: 1\n  chunk_len: 16\n"
    )
    (presets / "cartpole_balance" / "appo.yaml").write_text(
        "base: ppo\nruntime:\n  chunk_len: 16\n  mode: async\n"
    )
    # `unilab.config.compose` the attribute is the function; patch the module itself.
    monkeypatch.setattr(importlib.import_module("unilab.config.compose"), "PRESET_DIR", presets)
    monkeypatch.setitem(globals(), "PRESET_DIR", presets)
    assert repeated_values("cartpole_balance/ppo", tmp_path) == [
        "cartpole_balance/ppo: runtime.num_workers=1 repeats the value it has anyway"
    ]
    assert repeated_values("cartpole_balance/appo", tmp_path) == [
        "cartpole_balance/appo: runtime.chunk_len=16 repeats the value it has anyway"
    ]


@pytest.mark.parametrize("name", list_presets())
def test_preset_cites_only_files_that_exist(name: str) -> None:
    path = PRESET_DIR / f"{name}.yaml"
    comments = "\n".join(line for line in path.read_text().splitlines() if "#" in line)
    for cited in CITED.findall(comments):
        candidates = [REPO / cited, PRESET_DIR / cited, path.parent / cited]
        assert any(c.is_file() for c in candidates), f"{path} cites {cited}, which does not exist"


def test_shared_blocks_come_from_one_file() -> None:
    ppo = compose(["task=mjcf", "algo=ppo"])
    sac = compose(["task=mjcf", "algo=sac"])
    assert ppo.task == sac.task and ppo.task.mjcf_path == "gymnasium:ant.xml"
    assert ppo.sim == sac.sim and ppo.run == sac.run
    ppo = compose(["task=cartpole_balance", "algo=ppo"])
    appo = compose(["task=cartpole_balance", "algo=appo"])
    assert appo.runtime.mode == "async" and ppo.runtime.mode == "sync"
    assert appo.sim == ppo.sim and appo.run == ppo.run
    assert appo.algo.actor_hidden == ppo.algo.actor_hidden == [64, 64]


def test_base_errors_name_the_preset(tmp_path: Path) -> None:
    missing = tmp_path / "missing_base.yaml"
    missing.write_text("base: nowhere\n")
    with pytest.raises(ConfigError, match=r"base 'nowhere' not found .*nowhere\.yaml"):
        compose([f"preset={missing}"])
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("base: b\n")
    b.write_text("base: a\n")
    with pytest.raises(ConfigError, match="makes a cycle"):
        compose([f"preset={a}"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: {x: 1}\n")
    with pytest.raises(ConfigError, match="must be a preset name or a list"):
        compose([f"preset={bad}"])
    child = tmp_path / "child.yaml"
    child.write_text("base: cartpole_balance/ppo\nrun:\n  seed: 3\n")
    cfg = compose([f"preset={child}"])
    assert cfg.run.seed == 3 and cfg.sim.num_envs == 64  # 64 comes from the base
