"""`unilab improve`: rounds of rollouts -> advantages -> awr_flow -> evaluation."""

from __future__ import annotations

import argparse
from pathlib import Path

from unilab.cli.options import add_overrides, positive, split_items
from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=1, help="improvement rounds (default 1)")
    p.add_argument(
        "--episodes",
        type=int,
        default=20,
        help="rollout episodes per round (default 20); 0: train on the demonstrations alone, "
        "the control that shows what the rollouts add",
    )
    p.add_argument(
        "--eval-episodes",
        type=int,
        default=None,
        help="evaluation episodes after each round (default: --episodes)",
    )
    p.add_argument(
        "--eval-seed", type=int, default=12345, help="evaluation seed, every round (default 12345)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="rollouts of round k use seed + 1000 k (default 0)"
    )
    p.add_argument(
        "--takeover-after",
        type=float,
        default=None,
        metavar="S",
        help="HIL in simulation: the task's scripted expert takes over every rollout episode "
        "still running after S seconds; its frames train as interventions (default: off)",
    )
    p.add_argument(
        "--takeover-on-error",
        action="store_true",
        help="HIL in simulation: the expert takes over a rollout episode as soon as it sees the "
        "policy make a mistake (pick-and-place tasks: a missed grasp); with or without "
        "--takeover-after",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="R",
        help="tries per scene: --episodes / R scenes each rolled out R times (same start, other "
        "noise); advantages are then against the mean of the same scene's tries (default 1)",
    )
    p.add_argument(
        "--inference-settings",
        metavar="FILE",
        help="a `unilab tune-inference` report (its recommended settings) or a JSON object "
        "{setting: value}: every rollout and evaluation executes the policy with them "
        "(e.g. n_act, ensemble_decay, flow_steps); default: the policy's own",
    )
    p.add_argument(
        "--retune",
        type=int,
        default=None,
        metavar="ROUNDS",
        help="re-tune the inference settings of every run (the start's too unless "
        "--inference-settings is given) with ROUNDS `tune-inference` rounds; each run's "
        "evaluation and the next rollouts take the recommendation (default: off)",
    )
    p.add_argument(
        "--retune-episodes",
        type=int,
        default=None,
        help="episodes per tuner round with --retune (default 8)",
    )
    p.add_argument(
        "--retune-compare-seeds",
        type=int,
        default=None,
        help="fresh seeds per arm of the tuner's defaults-vs-choice check (default: --retune)",
    )
    p.add_argument(
        "--retune-space",
        action="append",
        metavar="NAME=V1,V2",
        help="one setting and its values for the tuner, repeatable (--retune-space n_act=2,4 "
        "--retune-space flow_steps=2,10; default: every setting of its default space the "
        "policy can use)",
    )
    p.add_argument(
        "--out",
        help="folder of the loop (store.zarr, round_<k>/, improve.json); default RUN/improve",
    )
    add_overrides(p, target="RUN")


def _run(args: argparse.Namespace) -> int:
    target, overrides = split_items(args.items, "improve", "run directory")
    if target is None:
        raise ConfigError("unilab improve needs a run directory: a bc_flow or awr_flow run")
    from unilab.cli.export import read_settings
    from unilab.workflows.improve import improve

    settings = read_settings(args.inference_settings) if args.inference_settings else None
    budget = None
    if args.retune is not None:
        from unilab.deploy.tune_inference import TuneError, parse_space
        from unilab.workflows.retune import RetuneBudget

        try:
            space = parse_space(args.retune_space) if args.retune_space else None
        except TuneError as exc:
            raise ConfigError(f"--retune-space: {exc}") from None
        episodes = 8 if args.retune_episodes is None else args.retune_episodes
        budget = RetuneBudget(args.retune, episodes, args.retune_compare_seeds, space)
    elif any(
        v is not None for v in (args.retune_space, args.retune_episodes, args.retune_compare_seeds)
    ):
        raise ConfigError(
            "--retune-space, --retune-episodes and --retune-compare-seeds need --retune ROUNDS"
        )
    improve(
        Path(target),
        rounds=positive(args.rounds, "--rounds"),
        episodes=args.episodes,
        out=args.out,
        eval_episodes=(
            None if args.eval_episodes is None else positive(args.eval_episodes, "--eval-episodes")
        ),
        eval_seed=args.eval_seed,
        seed=args.seed,
        overrides=overrides,
        takeover_after_s=args.takeover_after,
        takeover_on_error=args.takeover_on_error,
        repeats=positive(args.repeats, "--repeats"),
        inference_settings=settings,
        retune_budget=budget,
    )
    return 0


VERBS = [
    Verb(
        "improve",
        "improve a flow VLA from its own rollouts (awr_flow rounds)",
        _run,
        _arguments,
        description=(
            "Each round rolls out the current policy (RUN, then the previous round's run) "
            "into a store that starts as a copy of RUN's demos store, trains algo=awr_flow "
            "from it (advantages from the episode outcomes and the policy's own value heads, "
            "AWR sampling, RECAP), evaluates the new run and writes round_<k>/round.json; "
            "key=value overrides apply to every round's training (e.g. algo.steps=500)."
        ),
        epilog="example: unilab improve runs/arm_move_side/bc_flow/<ts> --rounds 3 --episodes 50",
    )
]
