"""`unilab data ...`: episode store maintenance and LeRobot interop.

    unilab data info|validate|repair STORE [--json] [--deep]
    unilab data export-lerobot STORE OUT_ROOT REPO_ID [--images image] [--episodes 0-9]
    unilab data import-lerobot DATASET_DIR STORE [--origin human]
    unilab data segment STORE [--critic PATH | --save-critic PATH] [--train-only] [...]
    unilab data curate STORE --out NEW [--idle-weight 0] [--keep-failures] [...]

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
def _store_errors() -> Iterator[None]:
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

    with _store_errors():
        doc = info(args.path)
    print(json.dumps(doc, indent=1) if args.json else format_info(doc))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from unilab.data.validate import validate

    with _store_errors():
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

    with _store_errors():
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
    with _store_errors():
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
    with _store_errors():
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


# -- segmentation critic ----------------------------------------------------------------------
SEGMENT_NOTE = (
    "The progress model is a pairwise MLP trained on the store's own episodes (autonomous "
    "successes, failed endings, the frames before each takeover); rates above "
    "--progress-threshold are progress, below --failure-threshold failure, between them idle; "
    "operator frames and the progress right after a failure are recovery. Labels go into the "
    "store's `segment` column (replaced atomically; nothing else changes). "
    "See docs/segmentation.md."
)


def _segment_arguments(p: argparse.ArgumentParser) -> None:
    from unilab.teleop.segmentation.config import SegmentConfig

    d = SegmentConfig()
    p.add_argument("store", help="episode store to label (opened for writing)")
    p.add_argument("--critic", help="a trained progress model (.pt): label with it, no training")
    p.add_argument(
        "--save-critic",
        help="where the newly trained progress model goes (default: <STORE>.critic.pt beside it)",
    )
    p.add_argument(
        "--train-only", action="store_true", help="train and save the model; write no labels"
    )
    p.add_argument("--steps", type=int, default=d.model.steps, help="training steps")
    p.add_argument(
        "--fields",
        default=",".join(d.model.fields),
        help="vector fields the model reads, comma-separated (default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=d.model.seed, help="training seed")
    for name in (
        "window",
        "smooth",
        "progress_threshold",
        "failure_threshold",
        "min_progress",
        "min_idle",
        "min_failure",
        "recovery_window",
    ):
        value = getattr(d, name)
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=type(value),
            default=value,
            help=f"(default {value}; see SegmentConfig)",
        )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _segment_config(args: argparse.Namespace) -> Any:
    from unilab.config.checks import config_problems
    from unilab.teleop.segmentation.config import SegmentConfig

    cfg = SegmentConfig()
    for name in (
        "window",
        "smooth",
        "progress_threshold",
        "failure_threshold",
        "min_progress",
        "min_idle",
        "min_failure",
        "recovery_window",
    ):
        setattr(cfg, name, getattr(args, name))
    cfg.model.steps, cfg.model.seed = args.steps, args.seed
    cfg.model.fields = [f.strip() for f in args.fields.split(",") if f.strip()]
    if not cfg.model.fields:
        raise ConfigError("--fields names no field; e.g. obs/policy")
    problems = [p.replace("_", "-") for p in config_problems(cfg)]
    if problems:
        raise ConfigError("; ".join(f"--{p}" for p in problems))
    cfg.check()
    return cfg


def _segment(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from unilab.teleop.segmentation import (
        label_store,
        load_progress_model,
        save_progress_model,
        train_progress_model,
    )
    from unilab.utils.progress import TrainingProgress

    cfg = _segment_config(args)
    if args.critic and (args.train_only or args.save_critic):
        raise ConfigError(
            "--critic labels with an existing model; leave out --train-only and "
            "--save-critic, or leave out --critic to train one"
        )
    doc: dict[str, Any] = {"store": args.store}
    with _store_errors():
        from unilab.data.store import EpisodeStore

        with EpisodeStore.open(args.store, "r") as st:  # a clear error before training
            episodes = len(st)
        if args.critic:
            model = load_progress_model(args.critic)
            doc["critic"] = args.critic
        else:
            t0 = time.perf_counter()
            with TrainingProgress(
                cfg.model.steps, "progress model", args.quiet, metric="loss"
            ) as bar:

                def on_step(step: int, loss: float) -> None:
                    if step % 20 == 0 or step + 1 == cfg.model.steps:
                        bar.update(step + 1, (step + 1) / (time.perf_counter() - t0), loss)

                model, report = train_progress_model(args.store, cfg.model, on_step=on_step)
            out = Path(args.save_critic or str(Path(args.store).resolve()) + ".critic.pt")
            save_progress_model(model, out)
            doc["critic"] = str(out)
            doc["training"] = {
                "pairs": report["pairs"],
                "loss_first": report["losses"][0],
                "loss_last": report["losses"][-1],
                "val_loss": report.get("val_loss"),
            }
        if not args.train_only:
            t1 = time.perf_counter()
            with TrainingProgress(episodes, "labelling", args.quiet, "episodes/s", "frames") as bar:

                def on_episode(e: int) -> None:
                    bar.update(e + 1, (e + 1) / (time.perf_counter() - t1), None)

                result = label_store(args.store, model, cfg, on_episode=on_episode)
            doc["labels"] = result.to_json()
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        if "training" in doc:
            t = doc["training"]
            print(
                f"trained the progress model on {t['pairs']} pairs (loss {t['loss_first']:.3g} "
                f"-> {t['loss_last']:.3g}); saved {doc['critic']}"
            )
        if "labels" in doc:
            lab = doc["labels"]
            counts = ", ".join(f"{k} {v}" for k, v in lab["counts"].items() if k != "none")
            print(
                f"labelled {lab['frames']} frames of {lab['episodes']} episodes in "
                f"{args.store}: {counts}"
            )
    return 0


def _curate_arguments(p: argparse.ArgumentParser) -> None:
    from unilab.teleop.segmentation.config import CurateConfig

    d = CurateConfig()
    p.add_argument("store", help="a labelled episode store (`unilab data segment`)")
    p.add_argument("--out", required=True, help="the new, curated store (must not exist)")
    for name in (
        "progress_weight",
        "recovery_weight",
        "idle_weight",
        "failure_weight",
        "unlabelled_weight",
        "min_run",
    ):
        value = getattr(d, name)
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=type(value),
            default=value,
            help=f"(default {value}; 0 drops those frames)"
            if "weight" in name
            else f"(default {value}) shortest kept run of frames",
        )
    p.add_argument(
        "--keep-failures",
        action="store_true",
        help="keep failure frames (weight --failure-weight) as negatives instead of dropping them",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _curate(args: argparse.Namespace) -> int:
    import time

    from unilab.config.checks import config_problems
    from unilab.data.store import EpisodeStore
    from unilab.teleop.segmentation import CurateConfig, curate
    from unilab.utils.progress import TrainingProgress

    cfg = CurateConfig(
        progress_weight=args.progress_weight,
        recovery_weight=args.recovery_weight,
        idle_weight=args.idle_weight,
        failure_weight=args.failure_weight,
        unlabelled_weight=args.unlabelled_weight,
        keep_failures=args.keep_failures,
        min_run=args.min_run,
    )
    problems = config_problems(cfg)
    if problems:
        raise ConfigError("; ".join("--" + p.replace("_", "-") for p in problems))
    with _store_errors():
        with EpisodeStore.open(args.store, "r") as st:
            episodes = len(st)
        t0 = time.perf_counter()
        with TrainingProgress(episodes, "curating", args.quiet, "episodes/s", "frames") as bar:

            def on_episode(e: int) -> None:
                bar.update(e + 1, (e + 1) / (time.perf_counter() - t0), None)

            result = curate(
                args.store, args.out, cfg, overwrite=args.overwrite, on_episode=on_episode
            )
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        kept = ", ".join(f"{k} {v}" for k, v in result.kept_by_label.items() if v)
        dropped = ", ".join(f"{k} {v}" for k, v in result.dropped_by_label.items() if v) or "none"
        print(
            f"curated {result.source_frames} frames of {result.source_episodes} episodes into "
            f"{result.out}: {result.frames} frames in {result.episodes} episodes "
            f"(kept {kept}; dropped {dropped})"
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
    Verb(
        "segment",
        "train the segmentation critic and label a store's frames (progress, idle, failure, "
        "recovery)",
        _segment,
        _segment_arguments,
        description="Train a progress model on the store's episodes (or load one with "
        "--critic) and write each frame's label into the store's `segment` column "
        "(unilab.teleop.segmentation). " + SEGMENT_NOTE,
        parent="data",
        order=62,
    ),
    Verb(
        "curate",
        "build the next round's training store from a labelled one",
        _curate,
        _curate_arguments,
        description="Copy a labelled store into a new one, weighting frames by label "
        "(progress and recovery kept, idle dropped or down-weighted, failure dropped or kept "
        "as negatives); cut episodes where frames are dropped; add a float32 `weight` column "
        "that FrameDataset.item_weights / WeightedFrameSampler read "
        "(unilab.teleop.segmentation.curate).",
        parent="data",
        order=63,
    ),
]
