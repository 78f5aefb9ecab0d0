"""`unilab fleet serve | sim | keygen`: the fleet view for a floor operator (docs/fleet.md).

unilab fleet keygen --dir keys/fleet
unilab fleet serve --keys keys/fleet --token "$TOKEN"        # http://127.0.0.1:8700
unilab fleet sim --keys keys/fleet --robots 12 --stall sim-03
"""

from __future__ import annotations

import argparse

from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError


def _keygen_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", required=True, help="fleet key directory to create or extend")
    p.add_argument(
        "--robot", action="append", default=[], help="robot host key name (default: sim)"
    )
    p.add_argument(
        "--station",
        action="append",
        default=[],
        help="operator station key name (default: operator)",
    )


def _keygen(args: argparse.Namespace) -> int:
    from unilab.teleop.fleet.keys import SIM_ROBOT, STATION, make_fleet_keys

    keys = make_fleet_keys(args.dir, args.robot or [SIM_ROBOT], args.station or [STATION])
    print(
        f"fleet keys in {keys.root}: server fleet, robots in {keys.allowed}, stations in {keys.stations}"
    )
    return 0


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keys", required=True, help="fleet key directory (unilab fleet keygen)")
    p.add_argument(
        "--host", default="127.0.0.1", help="web address to bind (default: localhost only)"
    )
    p.add_argument("--port", type=int, default=8700, help="web port (0: any free one)")
    p.add_argument("--link", default="tcp://127.0.0.1:7100", help="endpoint robot hosts dial")
    p.add_argument("--events", default="fleet-events.jsonl", help="event log (JSONL)")
    p.add_argument(
        "--token", default=None, help="operator token (else $UNILAB_FLEET_TOKEN, else random)"
    )
    p.add_argument(
        "--stall-s", type=float, default=3.0, help="stall alert after N s without motion"
    )
    p.add_argument("--lost-s", type=float, default=0.5, help="lost alert after N s without status")
    p.add_argument(
        "--fail-below", type=float, default=0.3, help="predicted-failure alert below this success"
    )
    p.add_argument("--ready-file", default=None, help="write {url, link} JSON here when serving")
    p.add_argument("--duration", type=float, default=None, help="stop after N seconds")


def _serve(args: argparse.Namespace) -> int:
    from unilab.teleop.fleet.server import FleetServerError, serve
    from unilab.teleop.keys import KeyFileError

    try:
        return serve(
            keys=args.keys,
            host=args.host,
            port=args.port,
            link=args.link,
            events_path=args.events,
            token=args.token,
            stall_s=args.stall_s,
            lost_s=args.lost_s,
            fail_below=args.fail_below,
            ready_file=args.ready_file,
            duration_s=args.duration,
        )
    except (FleetServerError, KeyFileError) as exc:
        raise ConfigError(str(exc)) from None
    except Exception as exc:
        if type(exc).__name__ == "ZMQError":  # the link endpoint is taken or malformed
            raise ConfigError(f"--link {args.link}: {exc}") from None
        raise


def _sim_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keys", required=True, help="fleet key directory (unilab fleet keygen)")
    p.add_argument("--robots", type=int, default=12, help="how many simulated robot hosts")
    p.add_argument("--fleet", default="tcp://127.0.0.1:7100", help="the fleet server's link")
    p.add_argument("--policy", default=None, help="exported policy.onnx or run directory")
    p.add_argument("--stall", action="append", default=[], metavar="ROBOT", help="jam this robot")
    p.add_argument(
        "--fail", action="append", default=[], metavar="ROBOT", help="make this robot's policy fail"
    )
    p.add_argument("--fault-after", type=float, default=5.0, help="inject faults after N s")
    p.add_argument("--no-thumbnails", action="store_true", help="send no camera thumbnails")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix", default="sim", help="robot names: PREFIX-01, PREFIX-02, ...")
    p.add_argument("--ready-file", default=None, help="write {robot: {pid, endpoint}} JSON here")
    p.add_argument("--duration", type=float, default=None, help="stop after N seconds")


def _sim(args: argparse.Namespace) -> int:
    from unilab.teleop.fleet.sim import FleetSimError, run_fleet_sim

    try:
        return run_fleet_sim(
            robots=args.robots,
            fleet=args.fleet,
            keys=args.keys,
            policy=args.policy,
            stall=args.stall,
            fail=args.fail,
            fault_after_s=args.fault_after,
            seed=args.seed,
            prefix=args.prefix,
            thumbnails=not args.no_thumbnails,
            ready_file=args.ready_file,
            duration_s=args.duration,
        )
    except FleetSimError as exc:
        raise ConfigError(str(exc)) from None


VERBS = [
    Verb("fleet", "fleet view: a server and dashboard for many robot hosts", order=43),
    Verb(
        "serve",
        "run the fleet server and its floor-operator dashboard",
        _serve,
        _serve_arguments,
        parent="fleet",
    ),
    Verb(
        "sim",
        "run simulated robot hosts that report to a fleet server",
        _sim,
        _sim_arguments,
        parent="fleet",
    ),
    Verb(
        "keygen",
        "make the fleet's CurveZMQ keys (server, robots, stations)",
        _keygen,
        _keygen_arguments,
        parent="fleet",
    ),
]
