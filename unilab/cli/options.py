"""Arguments several verbs share: `key=value` overrides, a run/policy target, counts."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from unilab.config.errors import ConfigError

_OVERRIDE = re.compile(r"^[A-Za-z_][\w.]*=")


def add_overrides(p: argparse.ArgumentParser, target: str | None = None) -> None:
    """One positional list for `key=value` overrides and, with `target`, one more word (a
    run directory, a policy file): `split_items` tells them apart, so their order is free."""
    if target:
        p.add_argument(
            "items",
            nargs="*",
            metavar=f"{target} | key=value",
            help=(f"{target}, and config overrides such as task.obs_noise=0.05 (any order)"),
        )
    else:
        p.add_argument(
            "items", nargs="*", metavar="key=value", help="config overrides, e.g. algo.lr=3e-4"
        )


def is_override(word: str) -> bool:
    return bool(_OVERRIDE.match(word))


def split_items(items: list[str], verb: str, what: str) -> tuple[str | None, list[str]]:
    """(target, overrides) from the words of `add_overrides(p, target=...)`."""
    overrides = [w for w in items if is_override(w)]
    targets = [w for w in items if not is_override(w)]
    if len(targets) > 1:
        raise ConfigError(
            f"unilab {verb} takes one {what}, got {targets}; config overrides are key=value"
        )
    return (targets[0] if targets else None), overrides


def positive(value: int, flag: str) -> int:
    if value < 1:
        raise ConfigError(f"{flag}={value} must be at least 1")
    return value


def output_base(target: Path) -> Path:
    """Where outputs go by default: the run directory for a run or its export/policy.onnx,
    else the folder holding the policy file."""
    if target.is_dir():
        return target.parent if target.name == "export" else target
    parent = target.parent
    return parent.parent if parent.name == "export" else parent
