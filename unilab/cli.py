"""The `unilab` command line: train, play, eval, export, viz, deploy, bench, list, data.

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
    "render": "camera frames/s per core: per-env vs tiled, task stepping with cameras",
    "experts": "tabletop scripted experts: success over 200 episodes, mode path distances",
    "learn_arm_reach": "arm_reach with PPO: wall time to 95 % evaluated success",
    "learn_quadruped": "quadruped_joystick_flat: velocity error at 0.5 m/s after a time budget",
    "learn_ant": "gymnasium ant.xml via the mjcf task: PPO and SAC return curves",
    "report": "write BENCHMARKS.md from bench/results/*.json",
}


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    if args.name in (None, "-h", "--help"):
        print("usage: unilab bench <name|all> [--quick] [--out PATH]\n\nbenchmarks:")
        for name, text in BENCHMARKS.items():
            print(f"  {name:<10} {text}")
        return 0 if args.name else EXIT_BAD_INPUT
    names = (
        [n for n in BENCHMARKS if not n.startswith("learn_")] if args.name == "all" else [args.name]
    )
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


def cmd_play(args: argparse.Namespace) -> int:
    from unilab.deploy.commands import cmd_play as run

    return run(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from unilab.deploy.commands import cmd_eval as run

    return run(args)


def cmd_export(args: argparse.Namespace) -> int:
    from unilab.deploy.commands import cmd_export as run

    return run(args)


def cmd_viz(args: argparse.Namespace) -> int:
    from unilab.deploy.commands import cmd_viz as run

    return run(args)


def cmd_deploy(args: argparse.Namespace) -> int:
    from unilab.deploy.commands import cmd_deploy as run

    return run(args)


def _add_policy_verbs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """play, viz, eval, export and deploy: the verbs that run or ship a trained policy."""
    target_help = "run directory (newest good checkpoint) or exported policy.onnx"

    def rollout_options(q: argparse.ArgumentParser, episodes: int) -> None:
        q.add_argument("target", nargs="?", help=target_help)
        q.add_argument("--episodes", type=int, default=episodes, help="episodes to run")
        q.add_argument(
            "--envs",
            type=int,
            default=0,
            help="envs stepped together (default: one per episode, at most 4); env 0 is "
            "filmed and recorded",
        )
        q.add_argument("--seed", type=int, default=0, help="seed of the simulated task")
        q.add_argument(
            "--spawn", action="store_true", help="open the Rerun viewer instead of an .rrd file"
        )
        q.add_argument(
            "--out", help="output base directory; files go to <out>/media/ (default: the run)"
        )
        q.add_argument("--name", help="file name stem of the outputs")
        q.add_argument("--width", type=int, default=640, help="video width in pixels")
        q.add_argument("--height", type=int, default=480, help="video height in pixels")
        _add_overrides(q)

    q = sub.add_parser(
        "play",
        help="run a policy in simulation; write video and a Rerun recording",
        description="Run a policy in simulation for N episodes; write <out>/media/<name>.mp4 "
        "(set MUJOCO_GL=egl on headless machines), <name>.rrd (Rerun) and <name>.json. "
        "task.* and sim.* key=value overrides change the simulated task; record=<store> "
        "appends the finished episodes to an episode store.",
    )
    rollout_options(q, episodes=1)
    q.add_argument("--no-video", action="store_true", help="skip the mp4")
    q.set_defaults(func=cmd_play)

    q = sub.add_parser(
        "viz",
        help="write (or --spawn) a Rerun recording of a run's newest checkpoint",
        description="Record one episode of the newest good checkpoint into the run's media "
        "directory as viz_<checkpoint>.rrd, or stream it to a viewer with --spawn.",
    )
    rollout_options(q, episodes=1)
    q.add_argument("--video", action="store_true", help="also write an mp4")
    q.set_defaults(func=cmd_viz)

    q = sub.add_parser(
        "eval",
        help="evaluate a policy over seeds; write JSON",
        description="Run N episodes per seed (one per env, so short episodes are not "
        "over-counted); report mean and std of return and length, success rate and "
        "termination reasons as JSON (schema unilab.eval/1, unilab/deploy/evaluate.py).",
    )
    q.add_argument("target", nargs="?", help=target_help)
    q.add_argument("--episodes", type=int, default=10, help="episodes per seed")
    q.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    q.add_argument(
        "--policy",
        choices=["trained", "zero", "random"],
        default="trained",
        help="the trained policy, or a zero / uniform random baseline",
    )
    q.add_argument("--out", help="write the JSON here instead of to stdout")
    _add_overrides(q)
    q.set_defaults(func=cmd_eval)

    q = sub.add_parser(
        "export",
        help="export a run's policy to ONNX and TorchScript",
        description="Write <run>/export/policy.onnx (with metadata), policy.pt (TorchScript) "
        "and metadata.json from the newest good checkpoint.",
    )
    q.add_argument("target", nargs="?", help="run directory")
    q.add_argument("--out", help="output directory (default: <run>/export)")
    q.set_defaults(func=cmd_export)

    q = sub.add_parser(
        "deploy",
        help="run an exported policy.onnx against a robot at its control rate",
        description="Control loop on onnxruntime alone (no torch): observe, infer, check, "
        "act at the policy's control rate; reports loop jitter. A non-finite or too large "
        "action is never sent: the last safe action is held and the loop stops (exit 4).",
    )
    q.add_argument("target", nargs="?", help="exported policy.onnx")
    q.add_argument("--robot", default="", help="sim:<task> (a simulated robot)")
    q.add_argument("--steps", type=int, default=1000, help="control steps to run")
    q.add_argument("--seed", type=int, default=0, help="seed of a simulated robot")
    q.add_argument(
        "--speed", type=float, default=1.0, help="run this many times faster than real time"
    )
    q.add_argument(
        "--max-action",
        type=float,
        default=None,
        help="stop on |action| above this (default: 3 x the task's action clip)",
    )
    q.add_argument("--out", help="write the JSON report here instead of to stdout")
    q.set_defaults(func=cmd_deploy)


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

    _add_policy_verbs(sub)

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
