"""`unilab data info|validate|repair <path>`: store maintenance from the command line.

Exit codes: 0 success (validate: clean), 1 validate found problems, 2 bad input (not a
store, store locked by a writer, bad arguments).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from unilab.data.errors import EpisodeStoreError
from unilab.data.repair import RepairReport, repair
from unilab.data.validate import Problem, info, validate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="unilab data", description="Episode store maintenance.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("info", "summary of a store"),
        ("validate", "check a store's integrity (read-only)"),
        ("repair", "restore the longest readable committed prefix (idempotent)"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("path", help="episode store directory")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name != "info":
            p.add_argument("--deep", action="store_true", help="also decode every chunk")
    return parser


def _format_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{n} B"
        size /= 1024
    return f"{n} B"


def format_info(doc: dict[str, Any]) -> str:
    lines = [
        f"episode store {doc['path']} (format {doc['format_version']}, created {doc['created_at']})",
        f"  episodes {doc['episodes']}, frames {doc['frames']}, on disk "
        f"{_format_bytes(doc['disk_bytes'])}",
    ]
    el = doc["episode_length"]
    lines.append(f"  episode length min {el['min']} mean {el['mean']:.1f} max {el['max']}")
    origins = ", ".join(f"{k} {v}" for k, v in doc["frames_by_origin"].items()) or "-"
    lines.append(f"  frames by origin: {origins}; intervention frames {doc['intervention_frames']}")
    lines.append("  success: " + (", ".join(f"{k} {v}" for k, v in doc["success"].items()) or "-"))
    lines.append(
        "  tasks: " + (", ".join(f"{k or '(none)'} {v}" for k, v in doc["tasks"].items()) or "-")
    )
    lines.append("  fields:")
    for name, spec in doc["fields"].items():
        lines.append(
            f"    {name:<24} {tuple(spec['shape'])!s:<16} {spec['dtype']:<8} "
            f"{spec['chunk_frames']} frames/chunk"
        )
    return "\n".join(lines)


def format_problems(path: str, problems: list[Problem]) -> str:
    if not problems:
        return f"{path}: ok"
    harmless = all(p.harmless for p in problems)
    head = (
        f"{path}: {len(problems)} problem(s), "
        + ("only leftovers of an interrupted append" if harmless else "committed data damaged")
        + "; `unilab data repair` fixes them"
    )
    return "\n".join([head, *(f"  {p}" for p in problems)])


def format_report(report: RepairReport) -> str:
    if not report.changed:
        return f"{report.path}: nothing to repair"
    lines = [f"{report.path}: repaired"]
    if report.removed_files:
        lines.append(f"  removed {len(report.removed_files)} temporary file(s)")
    if report.recreated:
        lines.append(f"  recreated missing arrays {report.recreated}")
    if report.truncated:
        lines.append(f"  truncated {len(report.truncated)} array(s) to the committed length")
    if report.after != report.before:
        lines.append(
            f"  dropped {report.dropped_episodes} episode(s) / {report.dropped_frames} frame(s): "
            f"{report.after.episodes} episodes, {report.after.frames} frames remain"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage
        return 0 if exc.code == 0 else 2
    try:
        if args.command == "info":
            doc = info(args.path)
            print(json.dumps(doc, indent=1) if args.json else format_info(doc))
            return 0
        if args.command == "validate":
            problems = validate(args.path, deep=args.deep)
            if args.json:
                print(json.dumps({"path": args.path, "problems": [p.to_json() for p in problems]}))
            else:
                print(format_problems(args.path, problems))
            return 1 if problems else 0
        report = repair(args.path, deep=args.deep)
        print(json.dumps(report.to_json(), indent=1) if args.json else format_report(report))
        return 0
    except EpisodeStoreError as exc:
        print(f"unilab data {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
