"""`unilab list`: registered tasks, algorithms, robots and the presets in configs/."""

from __future__ import annotations

import argparse

from unilab.cli.verb import Verb

WHAT = ("tasks", "algorithms", "algos", "robots", "presets", "all")


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", nargs="?", default="all", choices=WHAT, help="what to list")


def _run(args: argparse.Namespace) -> int:
    what = args.what
    if what in ("tasks", "all"):
        from unilab.bench.task_results import task_result
        from unilab.tasks.registry import TASKS

        print("tasks (measured: the newest bench result of the task's preset):")
        for name, entry in TASKS.items():
            print(f"  {name:<26} {entry.description}  [default algo: {entry.default_algo}]")
            print(f"  {'':<26} measured: {task_result(name)}")
    if what in ("algorithms", "algos", "all"):
        from unilab.algos.registry import ALGORITHMS

        print("algorithms:")
        for name, algo in ALGORITHMS.items():
            kind = "off-policy" if algo.off_policy else "on-policy"
            print(f"  {name:<26} {algo.description}  [{kind}]")
    if what in ("robots", "all"):
        from unilab.robots.registry import ROBOTS

        print("robots:")
        for name, spec in ROBOTS.items():
            print(f"  {name:<26} {spec.num_joints} actuated joints  ({spec.mjcf.name})")
    if what in ("presets", "all"):
        from unilab.config.compose import list_presets

        print("presets (configs/<task>/<name>.yaml; use preset=<task>/<name>):")
        for preset in list_presets():
            print(f"  {preset}")
    return 0


VERBS = [Verb("list", "list tasks, algorithms, robots or presets", _run, _arguments, order=90)]
