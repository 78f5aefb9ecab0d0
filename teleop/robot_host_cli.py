"""The robot host's command line: build the driver a `--robot` spec names, bind the
CurveZMQ sockets, optionally report to a fleet server, and run `RobotHost` until a signal,
a tick count or a duration ends it. Like the host, it needs no torch."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

import zmq

from unilab.robots.interface import RobotDriver
from unilab.teleop.link import HostSockets
from unilab.teleop.robot_host import RobotHost, RobotHostError


def make_driver(spec: str, **options: Any) -> RobotDriver:
    """`sim:<task>` or `lerobot:<type>:<port>` -> a driver (not yet connected)."""
    kind, _, rest = spec.partition(":")
    if kind == "sim" and rest:
        from unilab.deploy.sim_driver import SimDriver

        cams = options.get("cameras") or ()
        return SimDriver(
            {"name": rest, **dict(options.get("task_overrides") or {})},
            seed=int(options.get("seed", 0)),
            cameras=tuple(cams),
            max_step_fraction=float(options.get("max_step_fraction", 0.25)),
        )
    if kind == "lerobot":
        rtype, _, port = rest.partition(":")
        if not rtype or not port:
            raise RobotHostError(
                f"robot {spec!r}: use lerobot:<type>:<port>, e.g. lerobot:so101_follower:/dev/ttyACM0"
            )
        from unilab.robots.lerobot_follower import LeRobotDriver

        return LeRobotDriver(
            rtype,
            port,
            robot_id=options.get("robot_id") or None,
            cameras=options.get("lerobot_cameras") or {},
            max_step=options.get("max_step"),
        )
    raise RobotHostError(
        f"robot {spec!r}: expected sim:<task> (e.g. sim:arm_reach) or lerobot:<type>:<port> "
        "(e.g. lerobot:so101_follower:/dev/ttyACM0)"
    )


def run_robot_host(
    robot: str,
    *,
    key: str,
    allow: str,
    endpoint: str = "tcp://127.0.0.1:5555",
    name: str | None = None,
    seed: int = 0,
    cameras: tuple[str, ...] = (),
    camera_every: int = 5,
    max_step_fraction: float = 0.25,
    watchdog_periods: int = 3,
    max_ticks: int | None = None,
    duration_s: float | None = None,
    ready_file: str | None = None,
    task_overrides: dict[str, Any] | None = None,
    fleet: str | None = None,
    fleet_key: str | None = None,
) -> dict[str, Any]:
    """Build the driver, connect, bind, and run the host loop; returns final counters."""
    driver = make_driver(
        robot,
        seed=seed,
        cameras=cameras,
        max_step_fraction=max_step_fraction,
        task_overrides=task_overrides,
    )
    driver.connect()
    sockets = None
    reporter = None
    try:
        sockets = HostSockets.bind(secret_key=key, allow_dir=allow, endpoint=endpoint)
        if fleet:
            from unilab.teleop.fleet.reporter import FleetReporter

            if not fleet_key:
                raise RobotHostError("--fleet needs --fleet-key (the fleet server's public key)")
            reporter = FleetReporter(
                fleet,
                secret_key=key,
                server_key=fleet_key,
                sender=name or driver.name.replace(":", "-").replace("/", "_")[:64],
            )
        host = RobotHost(
            driver,
            sockets,
            name=name,
            watchdog_periods=watchdog_periods,
            camera_every=camera_every if cameras or driver.cameras else 0,
            fleet=reporter,
        )
        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: host.request_stop())
        if ready_file:
            with open(ready_file, "w") as fh:
                fh.write(sockets.command_endpoint + "\n" + sockets.status_endpoint + "\n")
        try:
            host.run(max_ticks=max_ticks, duration_s=duration_s)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return {
            "ticks": host.tick,
            "received": host.received,
            "accepted": host.accepted,
            "rejects": dict(host.rejects),
            "watchdog_stops": host.watchdog_stops,
            "late_ticks": host.late_ticks,
        }
    finally:
        if reporter is not None:
            reporter.close()
        if sockets is not None:
            sockets.close()
        driver.disconnect()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="unilab robot-host",
        description="Run a robot host: driver + safety filter + watchdog behind a CurveZMQ "
        "link (command socket on the endpoint's port, status stream on port + 1). Needs no "
        "torch; runs in LeRobot's environment for real arms.",
    )
    p.add_argument("--robot", required=True, help="sim:<task> or lerobot:<type>:<port>")
    p.add_argument("--key", required=True, help="this host's secret key file (.key_secret)")
    p.add_argument("--allow", required=True, help="directory of allowed client public *.key files")
    p.add_argument("--endpoint", default="tcp://127.0.0.1:5555", help="command socket to bind")
    p.add_argument("--name", default=None, help="robot name in status messages")
    p.add_argument("--seed", type=int, default=0, help="seed of a simulated robot")
    p.add_argument(
        "--camera",
        action="append",
        default=[],
        help="camera to stream (sim: 'scene' or an MJCF camera)",
    )
    p.add_argument("--camera-every", type=int, default=5, help="send camera frames every N ticks")
    p.add_argument(
        "--max-step-fraction",
        type=float,
        default=0.25,
        help="sim: largest command change per tick as a fraction of the joint range",
    )
    p.add_argument(
        "--watchdog-periods", type=int, default=3, help="safe stop after N silent periods"
    )
    p.add_argument("--max-ticks", type=int, default=None, help="stop after N ticks (tests)")
    p.add_argument("--duration", type=float, default=None, help="stop after N seconds")
    p.add_argument("--ready-file", default=None, help="write the bound endpoints here when ready")
    p.add_argument(
        "--task",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="sim: task config override, e.g. --task episode_length_s=2",
    )
    p.add_argument(
        "--fleet", default=None, help="report to a fleet server at this endpoint (tcp://HOST:PORT)"
    )
    p.add_argument("--fleet-key", default=None, help="the fleet server's public key file")
    return p


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RobotHostError(f"--task {item!r}: expected KEY=VALUE, e.g. episode_length_s=2")
        out[key.removeprefix("task.")] = _value(value)
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from unilab.teleop.keys import KeyFileError

    try:
        counters = run_robot_host(
            args.robot,
            key=args.key,
            allow=args.allow,
            endpoint=args.endpoint,
            name=args.name,
            seed=args.seed,
            cameras=tuple(args.camera),
            camera_every=args.camera_every,
            max_step_fraction=args.max_step_fraction,
            watchdog_periods=args.watchdog_periods,
            max_ticks=args.max_ticks,
            duration_s=args.duration,
            ready_file=args.ready_file,
            task_overrides=parse_overrides(args.task),
            fleet=args.fleet,
            fleet_key=args.fleet_key,
        )
    except (RobotHostError, KeyFileError, zmq.ZMQError) as exc:
        print(f"unilab robot-host: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # driver errors (hardware absent, lerobot missing) say what to do
        if type(exc).__name__ in (
            "LeRobotUnavailableError",
            "SimDriverError",
            "ConfigError",
            "UnknownNameError",
        ):
            print(f"unilab robot-host: error: {exc}", file=sys.stderr)
            return 2
        raise
    print(
        f"robot-host: {counters['ticks']} ticks, {counters['accepted']} commands accepted, "
        f"rejects {counters['rejects']}, watchdog stops {counters['watchdog_stops']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
