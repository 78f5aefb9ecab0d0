"""`unilab data ...`: episode store maintenance and LeRobot interop.

    unilab data info|validate|repair STORE [--json] [--deep]
    unilab data export-lerobot STORE OUT_ROOT REPO_ID [--images image] [--episodes 0-9]
    unilab data import-lerobot DATASET_DIR STORE [--origin human]
    unilab data segment|curate ...   (unilab/cli/data_segment.py)

Exit codes: 0 success (validate: clean), 1 validate found problems, 2 bad input (not a
store, store locked by a writer, bad arguments), 3 `lerobot` is not installed here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from unilab.cli.verb import NotAvailableError, Verb
from unilab.config.errors import ConfigError

if TYPE_CHECKING:
    from unilab.data.repair import RepairReport
    from unilab.data.validate import Problem


@contextmanager
def store_errors() -> Iterator[None]:
    """The store's and LeRobot interop's input errors → one message (exit 2); a missing
    `lerobot` → where to get it (exit 3)."""
    from unilab.data.errors import EpisodeStoreError
    from unilab.data.lerobot_io import LeRobotUnavailableError

    try:
        yield
    except LeRobotUnavailableError as exc:
        raise NotAvailableError(str(exc)) from None
    except (EpisodeStoreError, FileExistsError, FileNotFoundError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def parse_ids(text: str | None) -> list[int] | None:
    """'0,3,5-9' -> [0, 3, 5, 6, 7, 8, 9]; None -> None (all)."""
    if text is None:
        return None
    ids: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            low, dash, high = part.partition("-")
            ids += list(range(int(low), int(high) + 1)) if dash else [int(part)]
    except ValueError:
        raise ConfigError(f"--episodes {text!r} must be episode indices such as 0,3,5-9") from None
    if not ids:
        raise ConfigError("--episodes names no episode; e.g. 0,3,5-9")
    return ids


# -- info / validate / repair ---------------------------------------------------------------
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


def _store_arguments(deep: bool) -> Any:
    def arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("path", help="episode store directory")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if deep:
            p.add_argument("--deep", action="store_true", help="also decode every chunk")

    return arguments


def _info(args: argparse.Namespace) -> int:
    from unilab.data.validate import info

    with store_errors():
        doc = info(args.path)
    print(json.dumps(doc, indent=1) if args.json else format_info(doc))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from unilab.data.validate import validate

    with store_errors():
        problems = validate(args.path, deep=args.deep)
    if args.json:
        print(json.dumps({"path": args.path, "problems": [p.to_json() for p in problems]}))
    else:
        print(format_problems(args.path, problems))
    return 1 if problems else 0


def _repair_arguments(p: argparse.ArgumentParser) -> None:
    _store_arguments(deep=True)(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument(
        "--no-backup",
        action="store_true",
        help="do not keep copies of the files repair rewrites (quarantine is kept)",
    )


def _repair(args: argparse.Namespace) -> int:
    from unilab.data.repair import repair

    with store_errors():
        report = repair(args.path, deep=args.deep, dry_run=args.dry_run, backup=not args.no_backup)
    print(json.dumps(report.to_json(), indent=1) if args.json else format_report(report))
    return 0


# -- LeRobot --------------------------------------------------------------------------------
LEROBOT_NOTE = (
    "Needs the `lerobot` package, which lives in its own environment: `make test-lerobot` "
    "builds .venv-lerobot; run .venv-lerobot/bin/unilab there."
)


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", help="episode store directory")
    p.add_argument("out_root", help="folder that receives <repo_id>/")
    p.add_argument("repo_id", help="dataset name, e.g. me/demos")
    p.add_argument("--episodes", help="episode indices, e.g. 0,3,5-9 (default: all)")
    p.add_argument(
        "--images",
        choices=["video", "image"],
        default="video",
        help="cameras as mp4 video (lossy) or PNG images (exact)",
    )
    p.add_argument("--vcodec", default="libsvtav1", help="video codec (with --images video)")
    p.add_argument("--fps", type=float, help="frame rate (default: the episodes' own)")
    p.add_argument("--robot-type", help="robot type (default: the episodes' robot)")
    p.add_argument(
        "--no-extras", action="store_true", help="leave out unilab's own per-frame columns"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing export")


def _export_lerobot(args: argparse.Namespace) -> int:
    from unilab.data.lerobot_io import export_to_lerobot

    episodes = parse_ids(args.episodes)
    with store_errors():
        result = export_to_lerobot(
            args.store,
            args.out_root,
            args.repo_id,
            episodes=episodes,
            images=args.images,
            vcodec=args.vcodec,
            fps=args.fps,
            robot_type=args.robot_type,
            extras=not args.no_extras,
            overwrite=args.overwrite,
        )
    print(
        f"exported {result.episodes} episodes / {result.frames} frames at {result.fps} fps "
        f"to {result.path} in {result.seconds:.1f} s"
    )
    return 0


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="a LeRobot v3 dataset folder (holding meta/info.json)")
    p.add_argument("store", help="episode store to append to (created when absent)")
    p.add_argument("--repo-id", help="dataset name (default: from the dataset)")
    p.add_argument(
        "--origin",
        help="origin of every imported frame: sim, real, human or wm (default: the "
        "dataset's unilab.origin column, else human)",
    )
    p.add_argument("--episodes", help="episode indices, e.g. 0,3,5-9 (default: all)")
    p.add_argument("--video-backend", help="LeRobot's video decoder (default: its own)")


def _import_lerobot(args: argparse.Namespace) -> int:
    from unilab.data.lerobot_io import import_from_lerobot

    episodes = parse_ids(args.episodes)
    with store_errors():
        result = import_from_lerobot(
            args.dataset,
            args.store,
            repo_id=args.repo_id,
            origin=args.origin,
            episodes=episodes,
            video_backend=args.video_backend,
        )
    for note in result.notes:
        print(f"unilab data import-lerobot: {note}", file=sys.stderr)
    ids = result.episode_ids
    where = f"episodes {ids[0]}..{ids[-1]}" if ids else "no episodes"
    print(
        f"imported {len(ids)} episodes / {result.frames} frames into {result.store_path} "
        f"({where}) in {result.seconds:.1f} s"
    )
    return 0


VERBS = [
    Verb(
        "data",
        "episode store tools: info, validate, repair, LeRobot export/import, segment, curate",
        order=70,
    ),
    Verb("info", "summary of a store", _info, _store_arguments(deep=False), parent="data"),
    Verb(
        "validate",
        "check a store's integrity (read-only); exit 1 when problems are found",
        _validate,
        _store_arguments(deep=True),
        parent="data",
    ),
    Verb(
        "repair",
        "make a damaged store consistent; what no longer reads is quarantined, "
        "everything readable is kept (idempotent)",
        _repair,
        _repair_arguments,
        parent="data",
    ),
    Verb(
        "export-lerobot",
        "write a store's episodes as a LeRobot v3 dataset",
        _export_lerobot,
        _export_arguments,
        description="Write the store's episodes as the LeRobotDataset v3 <out_root>/<repo_id> "
        "(unilab.data.lerobot_io.export_to_lerobot). " + LEROBOT_NOTE,
        parent="data",
        order=60,
    ),
    Verb(
        "import-lerobot",
        "append a LeRobot v3 dataset's episodes to a store",
        _import_lerobot,
        _import_arguments,
        description="Append the episodes of a LeRobotDataset v3 folder to an episode store "
        "(unilab.data.lerobot_io.import_from_lerobot). " + LEROBOT_NOTE,
        parent="data",
        order=61,
    ),
]
