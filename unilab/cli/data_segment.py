"""`unilab data segment` / `unilab data curate`: the segmentation critic's verbs.

    unilab data segment STORE [--critic PATH | --save-critic PATH] [--train-only] [...]
    unilab data curate STORE --out NEW [--idle-weight 0] [--keep-failures] [...]

Exit codes as for the other `unilab data` verbs: 0 done, 2 bad input (one message).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from unilab.cli.data import store_errors
from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError

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
    with store_errors():
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
    with store_errors():
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
