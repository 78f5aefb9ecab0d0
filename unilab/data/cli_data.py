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
        (
            "repair",
            "make a damaged store consistent; what no longer reads is quarantined, "
            "everything readable is kept (idempotent)",
        ),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("path", help="episode store directory")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name != "info":
            p.add_argument("--deep", action="store_true", help="also decode every chunk")
        if name == "repair":
            p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
            p.add_argument(
                "--no-backup",
                action="store_true",
                help="do not keep copies of the files repair rewrites (quarantine is kept)",
            )
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
    head = "plan (dry run, nothing changed)" if report.dry_run else "repaired"
    lines = [f"{report.path}: {head}", *(f"  - {a}" for a in report.actions)]
    lines.append(
        f"  {report.after.episodes} episode(s), {report.after.frames} frame(s) "
        + ("would remain" if report.dry_run else "remain")
        + (
            f" ({report.dropped_episodes} episode(s) quarantined)"
            if report.dropped_episodes
            else ""
        )
    )
    if report.quarantine_dir:
        lines.append(f"  quarantine: {report.quarantine_dir}")
    if report.backup_dir:
        lines.append(f"  backup of rewritten files: {report.backup_dir}")
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
        report = repair(args.path, deep=args.deep, dry_run=args.dry_run, backup=not args.no_backup)
        print(json.dumps(report.to_json(), indent=1) if args.json else format_report(report))
        return 0
    except EpisodeStoreError as exc:
        print(f"unilab data {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
