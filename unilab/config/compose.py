"""Compose a `Config` from registered defaults, a YAML preset, a saved config and CLI overrides.

Order (later wins): dataclass defaults of the chosen task and algorithm → the preset
`configs/<task>/<algo>.yaml` (or `preset=NAME|PATH`), after the presets it names in `base:`
→ `config=PATH` / `resume=RUN_DIR`'s saved config → dotted `key=value` overrides. Then every
value is checked (`unilab.config.checks`: declared ranges and choices, finite floats, names
the registered task and algorithm know). Every problem is collected and raised as one
`ConfigError` before anything starts.

Tasks and algorithms are looked up through the lazy registries of `unilab.registry`, which
import their packages on first use: this module imports nothing above the config layer.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from unilab.config.checks import config_problems
from unilab.config.errors import ConfigError
from unilab.config.schema import DEFAULT_TASK, Config
from unilab.registry import ALGORITHMS, TASKS

PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"
SPECIAL_KEYS = ("task", "algo", "preset", "config", "resume")
BASE_KEY = "base"
"""A preset's `base:` names the preset(s) it starts from (a name or a list of names)."""


def parse_overrides(tokens: list[str]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Split `key=value` tokens into special keys (task, algo, ...) and dotted overrides."""
    special: dict[str, str] = {}
    dotted: list[tuple[str, str]] = []
    problems = []
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep or not key:
            problems.append(f"argument {token!r} is not of the form key=value (e.g. algo.lr=3e-4)")
        elif key in SPECIAL_KEYS:
            special[key] = value
        else:
            dotted.append((key, value))
    if problems:
        raise ConfigError(problems)
    return special, dotted


def load_yaml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{what} file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{what} file {path} must hold a mapping of sections, got {type(data).__name__}"
        )
    return data


def preset_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    return PRESET_DIR / f"{name_or_path}.yaml"


def base_path(name: str, preset: Path) -> Path:
    """Where a `base:` entry of `preset` points: `<task>/<algo>` under configs/, a bare name
    beside the preset (`base: ppo`), or a .yaml path relative to the preset's folder."""
    if name.endswith((".yaml", ".yml")):
        return preset.parent / name
    if "/" in name:
        return PRESET_DIR / f"{name}.yaml"
    return preset.parent / f"{name}.yaml"


def preset_layers(path: Path, _chain: tuple[Path, ...] = ()) -> list[tuple[str, dict[str, Any]]]:
    """A preset and the presets it names in `base:`, as (origin, data) layers, bases first."""
    data = load_yaml(path, "preset")
    bases = data.pop(BASE_KEY, None)
    if bases is None:
        bases = []
    elif isinstance(bases, str):
        bases = [bases]
    elif not (isinstance(bases, list) and all(isinstance(b, str) for b in bases)):
        raise ConfigError(
            f"preset {path}: {BASE_KEY}: must be a preset name or a list of names, e.g. "
            f"{BASE_KEY}: cartpole_balance/ppo; got {bases!r}"
        )
    layers: list[tuple[str, dict[str, Any]]] = []
    for name in bases:
        parent = base_path(name, path)
        if not parent.is_file():
            raise ConfigError(f"preset {path}: {BASE_KEY} {name!r} not found (looked for {parent})")
        if parent.resolve() in {p.resolve() for p in (*_chain, path)}:
            raise ConfigError(f"preset {path}: {BASE_KEY} {name!r} makes a cycle")
        layers += preset_layers(parent, (*_chain, path))
    layers.append((f"preset {path}", data))
    return layers


def list_presets() -> list[str]:
    return sorted(
        str(p.relative_to(PRESET_DIR).with_suffix("")) for p in PRESET_DIR.glob("*/*.yaml")
    )


def _is_strict(node: DictConfig) -> bool:
    """Structured (dataclass) nodes reject unknown keys; plain dict fields accept any key."""
    return dataclasses.is_dataclass(OmegaConf.get_type(node))


def _check_key(cfg: DictConfig, dotted: str) -> str | None:
    node: Any = cfg
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        section = ".".join(parts[:depth]) or "top level"
        if not isinstance(node, DictConfig):
            return f"unknown key {dotted!r}: {'.'.join(parts[:depth])} is a value, not a section"
        if part not in node:
            if not _is_strict(node):
                return None
            valid = [str(k) for k in node]
            close = difflib.get_close_matches(part, valid, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            return (
                f"unknown key {dotted!r}: {part!r} is not in section {section}{hint} "
                f"(valid keys: {', '.join(valid)})"
            )
        node = node[part]
    return None


def _expected_type(cfg: DictConfig, dotted: str) -> str:
    parent_key, _, leaf = dotted.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    cls = OmegaConf.get_type(parent) if isinstance(parent, DictConfig) else None
    if cls is not None and dataclasses.is_dataclass(cls):
        hint = typing.get_type_hints(cls).get(leaf)
        if hint is not None:
            return getattr(hint, "__name__", str(hint).replace("typing.", ""))
    return "a value of the field's type"


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            items.extend(_flatten(value, dotted + "."))
        else:
            items.append((dotted, value))
    return items


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _apply(
    cfg: DictConfig, items: list[tuple[str, Any]], origin: str, problems: list[str]
) -> DictConfig:
    """Merge each (key, value) into cfg; collect one problem per bad key or value."""
    for dotted, value in items:
        if dotted in ("task.name", "algo.name"):
            continue  # chosen before composing; the registry classes fix them
        problem = _check_key(cfg, dotted)
        if problem:
            problems.append(f"{origin}: {problem}")
            continue
        try:
            # merge (not update): frozen dataclass sections are read-only in place.
            cfg = typing.cast(DictConfig, OmegaConf.merge(cfg, _nested(dotted, value)))
        except OmegaConfBaseException:
            problems.append(
                f"{origin}: {dotted}={value!r} has the wrong type; expected {_expected_type(cfg, dotted)}"
            )
    return cfg


def _parse_value(raw: str) -> Any:
    """CLI values use YAML scalars (1, 0.5, true, null, [1,2]); 3e-4 counts as a float."""
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in "eE.") and value.strip() else value
        except ValueError:
            return value
    return value


def config_from_yaml(text: str) -> Config:
    """Rebuild a saved config (e.g. in a worker process) with full validation."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError("saved config must be a mapping of sections")
    return compose([], base=data)


def compose(tokens: list[str], base: dict[str, Any] | None = None) -> Config:
    """Build and validate a `Config` from CLI tokens; raises `ConfigError` on any problem.

    `base` is a saved config (as a dict) to start from instead of the preset.
    """
    special, dotted = parse_overrides(tokens)
    base = dict(base or {})
    if "config" in special:
        base = load_yaml(Path(special["config"]), "config")
    if "resume" in special:
        run_dir = Path(special["resume"])
        if not run_dir.is_dir():
            raise ConfigError(f"resume: run directory not found: {run_dir}")
        base = load_yaml(run_dir / "config.yaml", "resume config")
        base.setdefault("run", {})["resume"] = str(run_dir)

    task_name = special.get("task") or base.get("task", {}).get("name") or DEFAULT_TASK
    if task_name not in TASKS:
        raise ConfigError(TASKS.unknown_message(task_name))
    task_entry = TASKS.get(task_name)
    algo_name = special.get("algo") or base.get("algo", {}).get("name") or task_entry.default_algo
    if algo_name not in ALGORITHMS:
        raise ConfigError(ALGORITHMS.unknown_message(algo_name))
    algo_entry = ALGORITHMS.get(algo_name)

    cfg = OmegaConf.structured(
        Config(
            task=task_entry.config_cls(name=task_name), algo=algo_entry.config_cls(name=algo_name)
        )
    )
    problems: list[str] = []
    layers: list[tuple[str, dict[str, Any]]] = []
    if "preset" in special:
        layers += preset_layers(preset_path(special["preset"]))
    elif not base:
        auto = PRESET_DIR / task_name / f"{algo_name}.yaml"
        if auto.is_file():
            layers += preset_layers(auto)
    if base:
        layers.append(("saved config", base))
    for origin, data in layers:
        cfg = _apply(cfg, _flatten(data), origin, problems)
    cfg = _apply(cfg, [(k, _parse_value(v)) for k, v in dotted], "command line", problems)
    if problems:
        raise ConfigError(problems)
    config = _to_object(cfg)
    problems = _adopt_task(config, task_entry)
    problems += config_problems(config)
    problems += task_entry.check_config(config.task)
    problems += algo_entry.check_config(config.algo)
    if problems:
        raise ConfigError(problems)
    validate(config)
    return config


def _adopt_task(cfg: Config, task_entry: Any) -> list[str]:
    """Algorithm settings the chosen task fixes, so nobody sets them by hand: an algorithm
    config with a method `adopt_task(vocabulary) -> problems` takes the task's instruction
    words (e.g. the VLA's `algo.vocab_size`)."""
    adopt = getattr(cfg.algo, "adopt_task", None)
    return list(adopt(tuple(task_entry.vocabulary))) if callable(adopt) else []


def _to_object(cfg: DictConfig) -> Config:
    """The dataclass tree; a section whose own checks (`__post_init__`) refuse their values
    becomes a ConfigError naming that section's dotted key."""
    try:
        return typing.cast(Config, OmegaConf.to_object(cfg))
    except (ValueError, TypeError, OmegaConfBaseException) as exc:
        key, text = _failing_section(cfg, ""), str(exc).split("\n")[0]
        first, _, rest = text.partition(" ")
        section = OmegaConf.get_type(OmegaConf.select(cfg, key)) if key else None
        names = {f.name for f in dataclasses.fields(section)} if section else set()
        if (
            first in names and rest
        ):  # "friction_scale must ..." -> "task.randomization.friction_scale must ..."
            raise ConfigError(f"{key}.{first} {rest}") from None
        if key and text.startswith(f"{key}."):  # the section already named its key
            raise ConfigError(text) from None
        raise ConfigError(f"{key or 'config'}: {text}") from None


def _failing_section(node: DictConfig, prefix: str) -> str:
    """The deepest structured section whose conversion to its dataclass fails."""
    for key in node:
        name = str(key)
        child = node[name]
        if isinstance(child, DictConfig) and _is_strict(child):
            try:
                OmegaConf.to_object(child)
            except Exception:
                return _failing_section(child, f"{prefix}{name}.") or f"{prefix}{name}"
    return ""


def validate(cfg: Config) -> None:
    """Checks across sections, which no single field can state."""
    problems = []
    if cfg.sim.num_envs % cfg.runtime.num_workers:
        problems.append(
            f"sim.num_envs={cfg.sim.num_envs} does not split evenly over runtime.num_workers="
            f"{cfg.runtime.num_workers}; use a multiple of the worker count"
        )
    if cfg.runtime.backend == "ray" and cfg.runtime.num_workers % cfg.ray.hosts:
        problems.append(
            f"runtime.num_workers={cfg.runtime.num_workers} does not split evenly over "
            f"ray.hosts={cfg.ray.hosts}; use a multiple of ray.hosts"
        )
    if cfg.logging.record_store and cfg.runtime.mode == "async" and cfg.runtime.num_workers > 1:
        problems.append(
            "logging.record_store needs runtime.mode=sync or runtime.num_workers=1: async batches "
            "from several workers do not keep each env in the same column"
        )
    if problems:
        raise ConfigError(problems)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
