"""`unilab bench hil`: the HIL link's must-show numbers, over loopback against the simulated
robot host (arm_reach, 50 Hz).

Parts (all by default; `--part` picks one):
- security: 1,000 messages each from an unknown key, no key, and replayed sequence
  numbers (delivered counts), then 10,000 fuzzed messages (rejects per reason; the robot's
  target before and after);
- link_loss: SIGKILL the operator station process N times (default 100); the time from the
  kill to the host's safe stop (p50/p99/max; the requirement is p99 <= 150 ms);
- session: a scripted 5-minute session with takeovers, the default 3-period watchdog, and
  the stored `is_intervention` spans compared with the virtual operator's schedule.

`--quick` runs 10 link-loss trials and a 30 s session.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import zmq

from unilab.bench.common import machine_info, print_table, write_json
from unilab.teleop.demo_policy import write_demo_policy
from unilab.teleop.devices import DISCARD, RERECORD, SUCCESS
from unilab.teleop.fuzz import CommandFuzzer
from unilab.teleop.keys import load_public, load_secret
from unilab.teleop.link import ClientLink
from unilab.teleop.session_tools import (
    KeySet,
    compare_labels,
    free_port_pair,
    host_in_thread,
    link_loss_trial,
    make_keyset,
    run_scripted_session,
    start_host_process,
    start_station_process,
    stop_process,
)

N = 1000


def _wait(cond: Any, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and not cond():
        time.sleep(0.01)
    return bool(cond())


def _dealer(endpoint: str, keys: KeySet | None) -> zmq.Socket[Any]:
    sock: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if keys is not None:
        pub, sec = load_secret(keys.secret("intruder"))
        sock.curve_secretkey, sock.curve_publickey = sec, pub
        sock.curve_serverkey = load_public(keys.public("robot"))
    sock.connect(endpoint)
    return sock


def security(keys: KeySet, n_fuzz: int) -> dict[str, Any]:
    task = {"name": "arm_reach", "episode_length_s": 10_000.0}
    with host_in_thread(keys, task=task, watchdog_periods=10**6) as host:
        endpoint = host.sockets.command_endpoint
        link = ClientLink(
            endpoint,
            secret_key=keys.secret("alice"),
            server_key=keys.public("robot"),
            sender="bench",
        )
        link.hello("alice")
        fuzzer0 = CommandFuzzer("x", link.seq, np.zeros(7, np.float32), (np.zeros(7),) * 3, 0)
        frames = fuzzer0.command(np.zeros(7, np.float32))
        rows = []
        for label, key in (("unknown key", keys), ("no key", None)):
            sock = _dealer(endpoint, key)
            before = host.received
            for i in range(N):
                with contextlib.suppress(zmq.Again):
                    sock.send_multipart(frames, flags=zmq.NOBLOCK)
                if i % 100 == 0:
                    time.sleep(0.01)
            time.sleep(1.0)
            rows.append({"case": label, "sent": N, "delivered": host.received - before})
            sock.close(0)
        assert link.control("resume", operator="alice").body["ok"]
        hold = host.filter.target.copy()
        fuzz_sender = CommandFuzzer(
            link.sender,
            link.seq,
            hold,
            (host.filter.low, host.filter.high, host.filter.max_step),
            0,
        )
        good = fuzz_sender.command(hold)
        link.sock.send_multipart(good)
        _wait(lambda: host.accepted == 1)
        accepted, received = host.accepted, host.received
        for _ in range(N):
            link.sock.send_multipart(good)
        _wait(lambda: host.received == received + N)
        rows.append({"case": "replayed seq", "sent": N, "delivered": host.accepted - accepted})
        used = int(msgpack.unpackb(good[0])["seq"])
        fuzzer = CommandFuzzer(
            link.sender,
            link.seq,
            hold,
            (host.filter.low, host.filter.high, host.filter.max_step),
            used,
            seed=1,
        )
        before = Counter(host.rejects)
        received = host.received
        expected: Counter[str] = Counter()
        t0 = time.perf_counter()
        for i, (msg, reason) in enumerate(fuzzer.messages(n_fuzz)):
            link.sock.send_multipart(msg)
            expected[reason] += 1
            if i % 200 == 0:
                time.sleep(0.002)
        _wait(lambda: host.received == received + n_fuzz, 120.0)
        elapsed = time.perf_counter() - t0
        got = Counter(host.rejects)
        got.subtract(before)
        per_reason = {k: v for k, v in got.items() if v}
        result: dict[str, Any] = {
            "delivery": rows,
            "fuzz": {
                "sent": n_fuzz,
                "rejected": sum(per_reason.values()),
                "accepted": host.accepted - accepted,
                "per_reason": dict(sorted(per_reason.items())),
                "expected_per_reason": dict(sorted(expected.items())),
                "target_unchanged": bool(np.array_equal(host.filter.target, hold)),
                "robot_mode_after": host.mode,
                "seconds": elapsed,
            },
        }
        link.close()
    print_table(rows, ["case", "sent", "delivered"])
    fz = result["fuzz"]
    print(
        f"\nfuzz: {fz['sent']} sent, {fz['rejected']} rejected, {fz['accepted']} accepted, "
        f"target unchanged: {fz['target_unchanged']}, mode {fz['robot_mode_after']}"
    )
    print_table(
        [
            {"reason": k, "rejected": v, "expected": fz["expected_per_reason"].get(k)}
            for k, v in fz["per_reason"].items()
        ],
        ["reason", "rejected", "expected"],
    )
    return result


def link_loss(keys: KeySet, policy: Path, workdir: Path, trials: int) -> dict[str, Any]:
    endpoint = f"tcp://127.0.0.1:{free_port_pair()}"
    host = start_host_process(keys, endpoint, workdir)
    monitor = ClientLink(
        endpoint,
        secret_key=keys.secret("monitor"),
        server_key=keys.public("robot"),
        sender="monitor",
    )
    latencies, reasons, failed = [], Counter[str](), []
    try:
        monitor.hello("monitor", role="observer")
        monitor.subscribe()
        for k in range(trials):
            station = start_station_process(keys, endpoint, policy)
            try:
                latency, reason = link_loss_trial(monitor, station)
            except RuntimeError as exc:  # counted and reported, the run goes on
                failed.append(f"trial {k + 1}: {exc}")
                print(f"  trial {k + 1}/{trials}: FAILED {exc}", flush=True)
                continue
            finally:
                if station.poll() is None:
                    station.kill()
                    station.wait()
                if station.stderr is not None:
                    station.stderr.close()
            latencies.append(latency)
            reasons[reason.split(":")[0]] += 1
            print(f"  trial {k + 1}/{trials}: {latency * 1e3:.1f} ms", flush=True)
    finally:
        monitor.close()
        stop_process(host)
    ms = np.asarray(latencies) * 1e3
    out = {
        "trials": trials,
        "measured": len(latencies),
        "failed_trials": failed,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
        "min_ms": float(ms.min()),
        "over_150ms": int((ms > 150).sum()),
        "stop_reasons": dict(reasons),
        "latencies_ms": ms.tolist(),
    }
    print_table([out], ["trials", "min_ms", "p50_ms", "p99_ms", "max_ms", "over_150ms"])
    return out


def session(keys: KeySet, policy: Path, workdir: Path, duration_s: float) -> dict[str, Any]:
    store = workdir / "session.zarr"
    script = {(3, 50): SUCCESS, (7, 40): DISCARD, (11, 30): RERECORD}
    report, operator = run_scripted_session(
        keys,
        policy,
        store,
        workdir,
        duration_s=duration_s,
        seed=5,
        horizon=100,
        script=script,
        host_args=("--task", "episode_length_s=2"),
    )
    check = compare_labels(store, operator, 100)
    out = {
        "duration_s": report["duration_s"],
        "episodes_saved": check.episodes,
        "frames_saved": check.frames,
        "takeover_spans_recorded": check.spans,
        "takeovers": report["takeovers"],
        "full_length_episodes": check.full_length,
        "episodes_with_label_mismatch": len(check.mismatched_episodes),
        "episodes_off_schedule": len(check.off_schedule_episodes),
        "dropped_but_stored": len(check.dropped_but_stored),
        "labels_exact": check.exact,
        "episode_ends": check.ends,
        "held_frames": check.held_frames,
        "watchdog_safe_stops": report["safe_stops"],
        "command_gap_p99_ms": report["command_gap_p99_ms"],
        "command_gap_max_ms": report["command_gap_max_ms"],
        "host_rejects": report["host_rejects"],
        "host_late_ticks": report["host_late_ticks"],
        "discarded": report["episodes_discarded"],
        "rerecords": report["rerecords"],
    }
    print_table(
        [out],
        [
            "duration_s",
            "episodes_saved",
            "takeover_spans_recorded",
            "labels_exact",
            "held_frames",
            "watchdog_safe_stops",
            "command_gap_p99_ms",
        ],
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unilab bench hil", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--part", choices=["security", "link_loss", "session", "all"], default="all"
    )
    parser.add_argument("--quick", action="store_true", help="10 link-loss trials, a 30 s session")
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--session-s", type=float, default=None)
    parser.add_argument("--out", default="bench/results/hil.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    trials = args.trials or (10 if args.quick else 100)
    session_s = args.session_s or (30.0 if args.quick else 300.0)
    results: dict[str, Any] = {"machine": machine_info(), "quick": args.quick}
    out_path = Path(args.out)
    if out_path.exists() and args.part != "all":
        import json

        results = {**json.loads(out_path.read_text()), **results}
    with tempfile.TemporaryDirectory(prefix="unilab-bench-hil-") as tmp:
        work = Path(tmp)
        keys = make_keyset(work / "keys")
        policy = write_demo_policy("arm_reach", work / "policy.onnx")
        if args.part in ("security", "all"):
            print("== security")
            results["security"] = security(keys, 10_000)
        if args.part in ("link_loss", "all"):
            print(f"== link loss ({trials} trials)")
            results["link_loss"] = link_loss(keys, policy, work, trials)
        if args.part in ("session", "all"):
            print(f"== scripted session ({session_s:.0f} s)")
            results["session"] = session(keys, policy, work, session_s)
    results["load_average_at_end"] = list(os.getloadavg())
    write_json(out_path, results)
    print(f"\nwrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
