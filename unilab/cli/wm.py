"""`unilab wm train` / `unilab wm eval`: the world model (`unilab.worldmodel`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from unilab.cli.options import add_overrides, positive
from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError

# A world model has no policy to evaluate, export or show while it trains.
_WM_DEFAULTS = ["eval.every=0", "viz.rerun=false", "run.export=false"]


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bar (same as run.quiet=true)")
    add_overrides(p)


def _train(args: argparse.Namespace) -> int:
    from unilab.config.compose import compose
    from unilab.workflows.train import train

    tokens = ["algo=world_model", *_WM_DEFAULTS, *args.items]
    if args.quiet:
        tokens.append("run.quiet=true")
    cfg = compose(tokens)
    if cfg.algo.name != "world_model":
        raise ConfigError(f"unilab wm train trains algo=world_model, not algo={cfg.algo.name}")
    run = train(cfg)
    if run is not None:
        print(f"world model run: {run.path} (score it: unilab wm eval {run.path} --store STORE)")
    return 0


def _eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a world-model run directory (unilab wm train)")
    p.add_argument("--store", required=True, help="episode store to score against")
    p.add_argument("--chunks", type=int, default=4, help="chunks rolled out open loop")
    p.add_argument(
        "--episodes", type=int, default=0, help="use the last N episodes of the store (0: all)"
    )
    p.add_argument("--out", default="", help="JSON path (default <run>/wm_fidelity.json)")
    p.add_argument("--png", action="store_true", help="also write the curves next to the JSON")
    p.add_argument("--rrd", default="", help="Rerun recording: the first window, model vs real")


def _eval(args: argparse.Namespace) -> int:
    from unilab.data.store import EpisodeStore
    from unilab.worldmodel.fidelity import (
        WorldModelRunError,
        load_world_model,
        open_loop,
        plot_fidelity,
    )

    chunks = positive(args.chunks, "--chunks")
    try:
        loaded = load_world_model(Path(args.run))
        episodes = None
        if args.episodes:
            with EpisodeStore.open(args.store, "r") as store:
                total = len(store)
            episodes = list(range(max(0, total - args.episodes), total))
        shown: dict[str, Any] = {}
        doc = open_loop(
            loaded, Path(args.store), episodes=episodes, chunks=chunks, frames_out=shown
        )
    except WorldModelRunError as exc:
        raise ConfigError(str(exc)) from None
    out = Path(args.out) if args.out else Path(args.run) / "wm_fidelity.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for k, steps in enumerate(doc["horizon_steps"]):
        m, c = doc["model"], doc["copy_last"]
        print(
            f"{steps:4d} steps ahead: latent mse {m['latent_mse'][k]:.4g} (copy "
            f"{c['latent_mse'][k]:.4g}), psnr {m['psnr_db'][k]:.2f} dB (copy "
            f"{c['psnr_db'][k]:.2f}), proprio mse {m['proprio_mse'][k]:.4g} (copy "
            f"{c['proprio_mse'][k]:.4g})"
        )
    print(f"wrote {out} ({doc['windows']} windows of {doc['episodes']} episodes)", file=sys.stderr)
    if args.rrd:
        from unilab.worldmodel.rerun_view import write_side_by_side

        rrd = write_side_by_side(Path(args.rrd), shown["steps"], shown["model"], shown["real"])
        print(f"wrote {rrd} (wm/model/<camera> beside wm/real/<camera>)")
    if args.png:
        print(f"wrote {plot_fidelity(doc, out.with_suffix('.png'), str(args.run))}")
    return 0


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a world-model run trained with algo.horizon=1")
    p.add_argument("--policy", required=True, help="a VLA run (bc_flow / bc_mse) to roll out")
    p.add_argument("--start-store", required=True, help="store whose first frames start rollouts")
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-drift",
        type=float,
        default=None,
        help="reencode filter: also drop episodes whose latents drift apart by more than this "
        "(relative; off by default: a bound removed every rollout in unilab bench wm_filter)",
    )
    p.add_argument(
        "--ensemble",
        nargs="+",
        default=[],
        metavar="RUN",
        help="other world-model runs trained on the same data with other seeds: they step the "
        "same actions and their verdicts go into each episode's tags; --filter ensemble (or "
        "both) drops episodes where any of them disagrees with the main model's outcome",
    )
    p.add_argument(
        "--filter",
        choices=["reencode", "ensemble", "both", "state", "none"],
        default="reencode",
        help="reencode (default): the re-encoded second path's outcome (and --max-drift); "
        "ensemble: the --ensemble members' verdicts; both; state: the task's success rule on "
        "the predicted end state against the success head (a model of the critic state: "
        "task.state_policy=true); none. On models of the critic state reencode and state "
        "find the wrong outcomes; on image-only models no filter beats chance "
        "(unilab bench wm_filter, docs/worldmodel.md)",
    )
    p.add_argument("items", nargs="*", metavar="store=PATH", help="where to write the episodes")


def _generate(args: argparse.Namespace) -> int:
    from unilab.worldmodel.fidelity import WorldModelRunError, load_world_model
    from unilab.worldmodel.generate import generate
    from unilab.worldmodel.state_rule import task_state_rule

    # `--ensemble A B store=OUT`: the option's list swallows the positional store=PATH
    items = [*args.items, *(w for w in args.ensemble if w.startswith("store="))]
    runs = [w for w in args.ensemble if not w.startswith("store=")]
    stores = [w.removeprefix("store=") for w in items if w.startswith("store=")]
    other = [w for w in items if not w.startswith("store=")]
    if len(stores) != 1 or other:
        raise ConfigError(f"unilab wm generate takes one store=PATH for its output; got {items}")
    mode = args.filter
    if mode in ("ensemble", "both") and not runs:
        raise ConfigError(
            f"--filter {mode} needs --ensemble RUN [RUN ...]: world models trained on the same "
            "store with other seeds (unilab wm train ... run.seed=N)"
        )
    ensemble = []
    for run in runs:
        try:
            ensemble.append(load_world_model(Path(run)))
        except WorldModelRunError as exc:
            raise ConfigError(f"--ensemble {run}: {exc}") from None
    try:
        rule = task_state_rule(Path(args.run)) if mode == "state" else None
        report = generate(
            load_world_model(Path(args.run)),
            Path(args.policy),
            Path(args.start_store),
            Path(stores[0]),
            episodes=positive(args.episodes, "--episodes"),
            max_steps=positive(args.max_steps, "--max-steps"),
            seed=args.seed,
            max_drift=args.max_drift,
            wm_run=str(args.run),
            ensemble=ensemble,
            filter=mode,
            state_rule=rule,
        )
    except WorldModelRunError as exc:
        raise ConfigError(str(exc)) from None
    print(json.dumps(report.to_dict()))
    print(f"wrote {report.kept} of {report.generated} episodes to {stores[0]}", file=sys.stderr)
    return 0


def _loop_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--world-model",
        default=None,
        help="world-model run to start from (algo.horizon=1); not needed with --synthetic 0",
    )
    p.add_argument("--rounds", type=int, default=1, help="rounds (default 1)")
    p.add_argument("--episodes", type=int, default=20, help="real rollouts per round")
    p.add_argument(
        "--synthetic",
        type=int,
        default=32,
        help="model rollouts per round; 0: the real-only control (no world model)",
    )
    p.add_argument(
        "--synthetic-keep",
        choices=["success", "all"],
        default="success",
        help="synthetic episodes the policy trains on: those the model calls successes "
        "(default) or all of them",
    )
    p.add_argument(
        "--filter",
        choices=["reencode", "state", "none"],
        default="reencode",
        help="the generator's filter (see unilab wm generate --help); state needs a model of "
        "the critic state",
    )
    p.add_argument("--max-steps", type=int, default=200, help="steps of a model rollout")
    p.add_argument(
        "--max-drift", type=float, default=None, help="reencode filter drift bound (default off)"
    )
    p.add_argument("--wm-steps", type=int, default=500, help="world-model fine-tuning steps")
    p.add_argument(
        "--wm-share",
        type=float,
        default=0.25,
        help="cap on the share of every policy batch drawn from synthetic episodes: their "
        "share of the frames, at most this (default 0.25)",
    )
    p.add_argument(
        "--wm-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override for the world model's fine-tuning (repeatable), e.g. algo.batch_size=32",
    )
    p.add_argument("--eval-episodes", type=int, default=None, help="default: --episodes")
    p.add_argument("--eval-seed", type=int, default=12345)
    p.add_argument("--seed", type=int, default=0, help="round k uses seed + 1000 k")
    p.add_argument("--out", help="folder of the loop (default RUN/wm_loop)")
    add_overrides(p, target="RUN")


def _loop(args: argparse.Namespace) -> int:
    from unilab.cli.options import split_items
    from unilab.workflows.wm_loop import wm_loop

    target, overrides = split_items(args.items, "wm loop", "policy run directory")
    if target is None:
        raise ConfigError("unilab wm loop needs a policy run: a bc_flow or awr_flow run")
    if args.synthetic < 0:
        raise ConfigError(f"--synthetic={args.synthetic} must be at least 0")
    wm_loop(
        Path(target),
        None if args.world_model is None else Path(args.world_model),
        rounds=positive(args.rounds, "--rounds"),
        episodes=positive(args.episodes, "--episodes"),
        synthetic=args.synthetic,
        synthetic_keep=args.synthetic_keep,
        filter=args.filter,
        max_steps=positive(args.max_steps, "--max-steps"),
        wm_steps=positive(args.wm_steps, "--wm-steps"),
        wm_share=args.wm_share,
        max_drift=args.max_drift,
        out=args.out,
        eval_episodes=(
            None if args.eval_episodes is None else positive(args.eval_episodes, "--eval-episodes")
        ),
        eval_seed=args.eval_seed,
        seed=args.seed,
        overrides=overrides,
        wm_overrides=args.wm_set,
    )
    return 0


VERBS = [
    Verb("wm", "world model: train from an episode store, score open-loop fidelity", order=75),
    Verb(
        "train",
        "train a world model from data.store=PATH (algo=world_model on the offline loop)",
        _train,
        _train_arguments,
        description="Train the action-conditioned world model (unilab.worldmodel) from an "
        "episode store: same run directory, checkpoints, resume, TensorBoard and progress bar "
        "as `unilab train`. Example: unilab wm train task=arm_move_side data.store=demos.zarr",
        parent="wm",
    ),
    Verb(
        "eval",
        "open-loop error vs horizon of a world model against copy-last-frame",
        _eval,
        _eval_arguments,
        parent="wm",
    ),
    Verb(
        "generate",
        "roll a VLA out inside a one-step world model; write origin=wm episodes",
        _generate,
        _generate_arguments,
        description="Start from first frames of --start-store episodes, roll --policy out "
        "inside the world model (chunked execution, seeded noise), end episodes where the "
        "model's done head says so, keep those that pass the filter (--filter: the re-encoded "
        "second path, the --ensemble members' verdicts, both or none), and write them with "
        "origin=wm and the model's checkpoint in their metadata. "
        "Example: unilab wm generate <wm run> --policy <vla run> --start-store demos.zarr "
        "--ensemble <wm run seed 1> <wm run seed 2> store=synthetic.zarr",
        parent="wm",
    ),
    Verb(
        "loop",
        "rounds of real rollouts -> world-model fine-tune -> synthetic rollouts -> awr_flow",
        _loop,
        _loop_arguments,
        description="Each round rolls the policy out in the simulator (recorded with outcomes "
        "into a copy of its demos store), fine-tunes the world model on that store from the "
        "previous round's model, generates --synthetic origin=wm rollouts of the policy in it, "
        "trains awr_flow on real + synthetic with the synthetic share pinned at --wm-share, "
        "evaluates and writes round_<k>/round.json; key=value overrides go to the policy's "
        "training, --wm-set ones to the world model's.",
        epilog="example: unilab wm loop runs/arm_move_side/bc_flow/<ts> --world-model "
        "runs/arm_move_side/world_model/<ts> --rounds 3 --episodes 20 --synthetic 64",
        parent="wm",
    ),
]
