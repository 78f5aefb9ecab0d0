"""`unilab train`: compose a config, check that its task builds, train."""

from __future__ import annotations

import argparse
import dataclasses
import typing

from unilab.cli.options import add_overrides
from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bar (same as run.quiet=true)")
    add_overrides(p)


def _run(args: argparse.Namespace) -> int:
    from unilab.config.compose import compose
    from unilab.tasks.registry import check_task_builds
    from unilab.train.distributed import end_process_after_group
    from unilab.workflows.train import train

    tokens = list(args.items)
    if args.quiet:
        tokens.append("run.quiet=true")
    cfg = compose(tokens)
    # A task's own checks run in its constructor: build it once before anything is written.
    check_task_builds(cfg.task, cfg.sim, seed=cfg.run.seed)
    try:
        train(cfg)
    except SystemExit as exc:
        end_process_after_group(exc.code if isinstance(exc.code, int) else 1)
        raise
    end_process_after_group(0)  # a torchrun rank ends here (see its doc); else returns
    return 0


def config_keys_help(args: argparse.Namespace) -> str:
    """All config keys with type, default and doc, for the task/algo the overrides choose."""
    from omegaconf import OmegaConf

    from unilab.config.checks import field_check
    from unilab.config.compose import compose
    from unilab.config.docs import field_docs

    chosen = [t for t in args.items if t.split("=", 1)[0] in ("task", "algo", "preset")]
    try:
        cfg = compose(chosen)
    except ConfigError as exc:
        return f"(config keys unavailable: {exc})"
    lines = [f"config keys (task={cfg.task.name}, algo={cfg.algo.name}; set with key=value):"]

    def walk(obj: object, prefix: str) -> None:
        assert dataclasses.is_dataclass(obj)
        docs = field_docs(typing.cast(type, type(obj)))
        hints = typing.get_type_hints(type(obj))
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            key = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(value):
                walk(value, key + ".")
                continue
            hint = hints.get(f.name)
            tname = getattr(hint, "__name__", str(hint).replace("typing.", ""))
            shown = (
                OmegaConf.to_yaml({"v": value}).strip()[3:]
                if isinstance(value, dict)
                else repr(value)
            )
            check = field_check(type(obj), f.name)
            valid = f", {check.describe()}" if check else ""
            lines.append(f"  {key} ({tname}, default {shown}{valid})")
            if f.name in docs:
                lines.append(f"      {docs[f.name]}")

    walk(cfg, "")
    return "\n".join(lines)


VERBS = [
    Verb(
        "train",
        "train a policy (default task and its best preset if none given)",
        _run,
        _arguments,
        description="Train a policy. Writes runs/<task>/<algo>/<timestamp>/ with config.yaml, "
        "metrics.jsonl, TensorBoard events, checkpoints/, export/ and media/.\n\n"
        "Bad configuration stops before anything is written: one message, exit code 2.",
        order=0,
        more_help=config_keys_help,
    )
]
