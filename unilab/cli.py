"""The `unilab` command line: train, play, eval, export, viz, bench, list, data.

Configuration goes as dotted `key=value` overrides after the verb
(`unilab train task=arm_reach algo=ppo runtime.num_workers=2 algo.lr=3e-4`).
Bad input prints one readable message and exits 2; no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Callable

from unilab.config.errors import ConfigError
from unilab.registry import UnknownNameError

EXIT_BAD_INPUT = 2
EXIT_NOT_AVAILABLE = 3


class NotAvailableError(RuntimeError):
    """A verb whose machinery has not landed yet."""


def _config_keys_help(tokens: list[str]) -> str:
    """All config keys with type, default and doc, for the task/algo the tokens choose."""
    from omegaconf import OmegaConf

    from unilab.config.compose import compose
    from unilab.config.docs import field_docs

    try:
        cfg = compose([t for t in tokens if t.split("=", 1)[0] in ("task", "algo", "preset")])
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
            lines.append(f"  {key} ({tname}, default {shown})")
            if f.name in docs:
                lines.append(f"      {docs[f.name]}")

    walk(cfg, "")
    return "\n".join(lines)


def _add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="config overrides, e.g. algo.lr=3e-4"
    )


def cmd_train(args: argparse.Namespace) -> int:
    from unilab.config.compose import compose
    from unilab.train import train

    tokens = list(args.overrides)
    if args.quiet:
        tokens.append("run.quiet=true")
    cfg = compose(tokens)
    train(cfg)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    what = args.what
    if what in ("tasks", "all"):
        from unilab.tasks.registry import TASKS

        print("tasks:")
        for name, entry in TASKS.items():
            print(f"  {name:<26} {entry.description}  [default algo: {entry.default_algo}]")
    if what in ("algorithms", "algos", "all"):
        from unilab.algos.registry import ALGORITHMS

        print("algorithms:")
        for name, algo in ALGORITHMS.items():
            kind = "off-policy" if algo.off_policy else "on-policy"
            print(f"  {name:<26} {algo.description}  [{kind}]")
    if what in ("robots", "all"):
        from unilab.robots import ROBOTS

        print("robots:")
        for name, spec in ROBOTS.items():
            print(f"  {name:<26} {spec.num_joints} actuated joints  ({spec.mjcf.name})")
    if what in ("presets", "all"):
        from unilab.config.compose import list_presets

        print("presets (configs/<task>/<algo>.yaml):")
        for preset in list_presets():
            print(f"  {preset}")
    return 0


BENCHMARKS = {
    "sim": "raw mujoco.batch ceiling vs unilab task stepping vs gymnasium vector envs",
    "runtime": "collection throughput vs the ceiling; sync vs async overlap",
    "e2e": "time to a target return: unilab async, sync, Stable-Baselines3",
    "scaling": "env steps/s against workers, envs per worker and threads",
}


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    if args.name in (None, "-h", "--help"):
        print("usage: unilab bench <name|all> [--quick] [--out PATH]\n\nbenchmarks:")
        for name, text in BENCHMARKS.items():
            print(f"  {name:<10} {text}")
        return 0 if args.name else EXIT_BAD_INPUT
    names = list(BENCHMARKS) if args.name == "all" else [args.name]
    for name in names:
        if name not in BENCHMARKS:
            raise ConfigError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}, all")
    status = 0
    for name in names:
        try:
            module = importlib.import_module(f"unilab.bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"unilab.bench.{name}":
                raise
            raise NotAvailableError(
                f"benchmark {name!r} is not available yet (the benchmark issue #8 adds it)"
            ) from None
        status = max(status, int(module.main(list(args.rest))))
    return status


def cmd_data(args: argparse.Namespace) -> int:
    from unilab.data.cli_data import main as data_main

    return data_main(list(args.rest))


def _not_yet(verb: str, issue: str) -> Callable[[argparse.Namespace], int]:
    def run(_: argparse.Namespace) -> int:
        raise NotAvailableError(
            f"'unilab {verb}' is not available yet: its machinery lands with {issue}. "
            f"Nothing was run."
        )

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="unilab",
        description="Train robot policies on batched MuJoCo; export, play and evaluate them.",
        epilog="Run `unilab <verb> --help` for a verb's options and config keys.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="<verb>")
    sub.required = True

    p = sub.add_parser(
        "train",
        help="train a policy (default task and its best preset if none given)",
        description="Train a policy. Writes runs/<task>/<algo>/<timestamp>/ with config.yaml, "
        "metrics.jsonl, TensorBoard events, checkpoints/, export/ and media/.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    p.add_argument("-h", "--help", action="store_true", help="show this help and the config keys")
    p.add_argument("--quiet", action="store_true", help="no progress bar (same as run.quiet=true)")
    _add_overrides(p)
    p.set_defaults(func=cmd_train, keys_help=True, parser=p)

    for verb, text, issue in (
        (
            "play",
            "run a policy in simulation; write video and a Rerun recording",
            "the export/play issue (#6)",
        ),
        ("eval", "evaluate a policy over seeds; write JSON", "the export/play issue (#6)"),
        ("export", "export a run's policy to ONNX and TorchScript", "the export/play issue (#6)"),
        ("viz", "open or write a Rerun recording of a run", "the export/play issue (#6)"),
    ):
        q = sub.add_parser(verb, help=text, description=f"{text[0].upper()}{text[1:]}.")
        q.add_argument("target", nargs="?", help="run directory, policy file or benchmark name")
        _add_overrides(q)
        q.set_defaults(func=_not_yet(verb, issue))

    q = sub.add_parser(
        "bench",
        help="run a benchmark: " + ", ".join(BENCHMARKS) + ", or all",
        description="Run a benchmark; each prints a table and writes JSON "
        "(default bench/results/<name>.json).",
        add_help=False,
    )
    q.add_argument("name", nargs="?", help=f"one of {', '.join(BENCHMARKS)}, all")
    q.add_argument("rest", nargs=argparse.REMAINDER, help="--quick, --out PATH, ...")
    q.set_defaults(func=cmd_bench)

    q = sub.add_parser("list", help="list tasks, algorithms, robots or presets")
    q.add_argument(
        "what",
        nargs="?",
        default="all",
        choices=["tasks", "algorithms", "algos", "robots", "presets", "all"],
    )
    q.set_defaults(func=cmd_list)

    q = sub.add_parser("data", help="episode store tools: info, validate, repair", add_help=False)
    q.add_argument("rest", nargs=argparse.REMAINDER)
    q.set_defaults(func=cmd_data)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "keys_help", False) and args.help:
        args.parser.print_help()
        print()
        print(_config_keys_help(list(args.overrides)))
        return 0
    try:
        return int(args.func(args))
    except (ConfigError, UnknownNameError) as exc:
        print(f"unilab {args.verb}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NotAvailableError as exc:
        print(f"unilab {args.verb}: {exc}", file=sys.stderr)
        return EXIT_NOT_AVAILABLE
    except KeyboardInterrupt:
        print(f"unilab {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
