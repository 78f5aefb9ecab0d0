"""`unilab robot-host`, `unilab hil run`, `unilab teleop keygen`: the human-in-the-loop verbs.

Each parses its own options (`unilab hil run --help`) in `unilab.teleop`; the robot host
needs no torch, so it also runs as `python -m unilab.teleop.robot_host` in LeRobot's
environment.
"""

from __future__ import annotations

import argparse

from unilab.cli.verb import Verb


def _robot_host(args: argparse.Namespace) -> int:
    from unilab.teleop.robot_host import main

    return main(list(args.rest))


def _hil_run(args: argparse.Namespace) -> int:
    from unilab.teleop.station import main

    return main(list(args.rest))


def _keygen(args: argparse.Namespace) -> int:
    from unilab.teleop.keys import main

    return main(list(args.rest))


VERBS = [
    Verb(
        "robot-host",
        "run a robot host: driver, safety filter, watchdog behind an authenticated link",
        _robot_host,
        raw=True,
        order=40,
    ),
    Verb("hil", "human-in-the-loop sessions on a robot host", order=41),
    Verb(
        "run",
        "operator station: policy, teleop takeover, per-frame intervention recording",
        _hil_run,
        parent="hil",
        raw=True,
    ),
    Verb("teleop", "operator tools: CurveZMQ key pairs", order=42),
    Verb(
        "keygen",
        "make a CurveZMQ key pair for a robot host or a client",
        _keygen,
        parent="teleop",
        raw=True,
    ),
]
