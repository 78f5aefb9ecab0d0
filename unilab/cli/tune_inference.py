"""`unilab tune-inference`: Thompson sampling over a chunked policy's inference settings."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from unilab.cli.options import add_overrides, positive, split_items
from unilab.cli.play import load_target
from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError


def progress_line(row: dict[str, Any], rounds: int) -> str:
    """One stderr line per finished bandit round or comparison arm."""
    what = f"round {row['round'] + 1}/{rounds}" if "round" in row else f"compare {row['compare']}"
    settings = " ".join(f"{k}={v}" for k, v in row["settings"].items())
    return f"tune-inference: {what}: {settings}: {row['successes']}/{row['episodes']} successes"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=10, help="bandit rounds (default 10)")
    p.add_argument(
        "--episodes-per-round",
        type=int,
        default=8,
        help="evaluation episodes per round, one per env (default 8)",
    )
    p.add_argument("--seed", type=int, default=0, help="bandit and first task seed")
    p.add_argument(
        "--space",
        nargs="+",
        metavar="NAME=V1,V2",
        help="settings and their values, e.g. n_act=2,4,8 guidance_scale=1,2 "
        "ensemble_decay=none,0.01 (default: every setting of DEFAULT_SPACE the policy can use)",
    )
    p.add_argument(
        "--decay",
        type=float,
        default=0.9,
        help="posterior evidence kept per round (1.0: none forgotten; default 0.9)",
    )
    p.add_argument(
        "--compare-seeds",
        type=int,
        default=None,
        help="fresh seeds for the defaults-vs-chosen comparison (default: --rounds, the "
        "tuning's own budget per arm)",
    )
    p.add_argument("--out", help="write the JSON report here instead of to stdout")
    p.add_argument(
        "--write",
        action="store_true",
        help="re-export the run with the recommended settings (the choice if it beat the "
        "defaults on the fresh episodes, else the defaults) in its ONNX export "
        "(`unilab export RUN --inference-settings REPORT` does the same later)",
    )
    add_overrides(p, target="RUN")


def _run(args: argparse.Namespace) -> int:
    from unilab.deploy.sim_task import configs_for_policy
    from unilab.deploy.tune_inference import TuneError, parse_space, tune_inference

    target, overrides = split_items(args.items, "tune-inference", "run directory or policy.onnx")
    policy = load_target(target, "tune-inference")
    meta = policy.metadata
    task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, overrides)
    if not 0.0 <= args.decay <= 1.0:
        raise ConfigError(f"--decay {args.decay} must be in [0, 1]")
    try:
        space = parse_space(args.space) if args.space else None
        report = tune_inference(
            policy,
            task_cfg,
            sim_cfg,
            space=space,
            rounds=positive(args.rounds, "--rounds"),
            episodes_per_round=positive(args.episodes_per_round, "--episodes-per-round"),
            seed=args.seed,
            decay=args.decay,
            compare_seeds=(
                positive(args.compare_seeds, "--compare-seeds")
                if args.compare_seeds is not None
                else None
            ),
            on_round=lambda row: print(progress_line(row, args.rounds), file=sys.stderr),
        )
    except TuneError as exc:
        raise ConfigError(str(exc)) from None
    for name, why in report["skipped"].items():
        print(f"tune-inference: {name} left out: {why}", file=sys.stderr)
    cmp = report["comparison"]
    print(
        f"chosen {report['chosen']} (defaults {report['defaults']}); on "
        f"{len(cmp['seeds'])} fresh seeds x {report['episodes_per_round']} episodes: success "
        f"{cmp['chosen']['success_rate']:.2f} chosen vs {cmp['defaults']['success_rate']:.2f} "
        f"defaults; recommended {report['recommended']}: {report['recommendation']}",
        file=sys.stderr,
    )
    if args.write:
        from unilab.export.run_export import export_run

        run = Path(str(target))
        if not (run / "checkpoints").is_dir():
            raise ConfigError(
                "--write re-exports a run directory; for an ONNX file, export its run with "
                "`unilab export RUN --inference-settings REPORT`"
            )
        written = export_run(run, inference_settings=report["recommended"])
        report["written"] = {k: str(v) for k, v in written.items()}
        print(f"exported with the recommended settings: {written['onnx']}", file=sys.stderr)
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        from unilab.utils.atomic import atomic_write_text

        atomic_write_text(args.out, text)
        print(f"tune report: {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


VERBS = [
    Verb(
        "tune-inference",
        "choose a VLA's inference settings by Thompson sampling over episodes",
        _run,
        _arguments,
        description="Each round a factorised Thompson-sampling bandit (SettingsBandit) picks "
        "one value per setting (n_act, ensemble_decay, guidance_scale, noise_temperature, "
        "best_of_n, flow_steps), runs --episodes-per-round evaluation episodes with them "
        "and credits their successes; posteriors decay by --decay per round. Settings the "
        "policy cannot use are left out with a note. Reports the chosen settings and a "
        "defaults-vs-chosen comparison at equal budget on fresh seeds as JSON, and "
        "recommends the choice only if it beat the defaults there; --write puts the "
        "recommended settings into the run's ONNX export (read by unilab deploy).",
        order=13,
    )
]
