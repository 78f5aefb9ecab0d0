"""The `unilab` command line: one module per verb group in this package.

    unilab train task=arm_reach algo.lr=3e-4 --quiet     # options and key=value in any order
    unilab play runs/arm_reach/ppo/<ts> record=demos.zarr --episodes 20
    unilab data export-lerobot demos.zarr exports me/demos

Adding a verb is a one-module change: write `unilab/cli/<group>.py` with a `VERBS` list,

    from unilab.cli.verb import Verb

    def _arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("store", help="episode store directory")
        p.add_argument("--episodes", type=int, default=10, help="episodes to collect")
        add_overrides(p)  # unilab.cli.options: key=value config overrides

    def _run(args: argparse.Namespace) -> int:
        from unilab.data.collect import collect  # heavy imports inside run: --help stays fast

        collect(args.store, episodes=args.episodes)  # a library function users can call too
        return 0

    VERBS = [Verb("collect", "record expert episodes into a store", _run, _arguments)]

Sub-verbs (`unilab teleop keygen`) name their group: a `Verb("teleop", "...")` without `run`
and `Verb("keygen", "...", _run, _arguments, parent="teleop")`. Every verb answers `--help`.
Raise `ConfigError` for bad input (exit 2, one message, no traceback) and
`NotAvailableError` for a missing optional part (exit 3); `unilab/cli/verb.py` has the rules.
"""

from __future__ import annotations

import os
import sys

from unilab.cli.verb import discover, dispatch


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `unilab` console script; returns the exit code."""
    try:
        return dispatch(sys.argv[1:] if argv is None else argv, discover(__name__))
    except BrokenPipeError:  # `unilab data info s | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


__all__ = ["main"]
