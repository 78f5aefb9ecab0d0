"""Config composition: overrides, presets, saved configs, and every kind of bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from unilab.config import ConfigError, compose, to_yaml
from unilab.config.schema import DEFAULT_TASK


def test_defaults_choose_default_task_and_its_algorithm() -> None:
    cfg = compose([])
    assert cfg.task.name == DEFAULT_TASK
    assert cfg.algo.name == "ppo"


def test_dotted_overrides_are_typed() -> None:
    cfg = compose(["algo.lr=3e-4", "runtime.num_workers=2", "runtime.mode=async", "run.quiet=true"])
    assert cfg.algo.lr == pytest.approx(3e-4)
    assert isinstance(cfg.algo.lr, float)
    assert cfg.runtime.num_workers == 2
    assert cfg.runtime.mode == "async"
    assert cfg.run.quiet is True


def test_unknown_key_names_key_section_and_closest_keys() -> None:
    with pytest.raises(ConfigError) as err:
        compose(["runtime.num_worker=2"])
    msg = str(err.value)
    assert "runtime.num_worker" in msg
    assert "section runtime" in msg
    assert "num_workers" in msg  # the closest valid key


def test_unknown_section_lists_sections() -> None:
    with pytest.raises(ConfigError) as err:
        compose(["runtim.mode=sync"])
    msg = str(err.value)
    assert "'runtim'" in msg and "top level" in msg and "runtime" in msg


def test_wrong_type_names_key_value_and_expected_type() -> None:
    with pytest.raises(ConfigError) as err:
        compose(["runtime.num_workers=many"])
    msg = str(err.value)
    assert "runtime.num_workers" in msg and "'many'" in msg and "int" in msg


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        compose(["runtime.num_workers=many", "algo.lrr=1"])
    assert len(err.value.problems) == 2


def test_unknown_task_lists_registered_tasks() -> None:
    with pytest.raises(ConfigError) as err:
        compose(["task=cartpole_balanse"])
    msg = str(err.value)
    assert "cartpole_balanse" in msg and "Registered:" in msg and "cartpole_balance" in msg
    assert "Did you mean cartpole_balance" in msg


def test_unknown_algorithm_lists_registered_algorithms() -> None:
    with pytest.raises(ConfigError) as err:
        compose(["algo=dqn"])
    msg = str(err.value)
    assert "'dqn'" in msg and "ppo" in msg


def test_missing_preset_or_config_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=str(missing)):
        compose([f"preset={missing}"])
    with pytest.raises(ConfigError, match=str(missing)):
        compose([f"config={missing}"])
    with pytest.raises(ConfigError, match="run directory not found"):
        compose([f"resume={tmp_path / 'no_run'}"])


def test_bad_yaml_and_bad_keys_in_a_preset(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("runtime: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        compose([f"preset={bad}"])
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("runtime:\n  threads: 2\n")
    with pytest.raises(ConfigError) as err:
        compose([f"preset={wrong}"])
    assert str(wrong) in str(err.value) and "runtime.threads" in str(err.value)


def test_argument_without_equals_is_rejected() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        compose(["runtime.num_workers"])


def test_semantic_checks() -> None:
    with pytest.raises(
        ConfigError, match=re.escape("runtime.mode='sometimes' must be one of 'sync', 'async'")
    ):
        compose(["runtime.mode=sometimes"])
    with pytest.raises(ConfigError, match=re.escape("runtime.chunk_len=0 must be >= 1")):
        compose(["runtime.chunk_len=0"])
    with pytest.raises(ConfigError, match="does not split evenly"):
        compose(["sim.num_envs=5", "runtime.num_workers=2"])


def test_saved_config_relaunches_identically(tmp_path: Path) -> None:
    cfg = compose(["algo.lr=5e-4", "runtime.chunk_len=16", "run.seed=7"])
    saved = tmp_path / "config.yaml"
    saved.write_text(to_yaml(cfg))
    again = compose([f"config={saved}"])
    assert again == cfg
    tweaked = compose([f"config={saved}", "run.seed=8"])
    assert tweaked.run.seed == 8 and tweaked.algo.lr == pytest.approx(5e-4)
