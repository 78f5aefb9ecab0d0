"""`unilab eval`: a policy's return, length and success over seeds, as JSON."""

from __future__ import annotations

import argparse
import json
import sys

from unilab.cli.options import add_overrides, positive, split_items
from unilab.cli.play import (
    alert_arguments,
    alert_options,
    apply_flow_steps,
    apply_inference_settings,
    execution_arguments,
    execution_options,
    load_target,
)
from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(
            f"--seeds {text!r} must be comma-separated integers, e.g. 0,1,2"
        ) from None
    if not seeds:
        raise ConfigError("--seeds must name at least one seed, e.g. 0,1,2")
    return seeds


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--episodes", type=int, default=10, help="episodes per seed")
    p.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    p.add_argument(
        "--policy",
        choices=["trained", "zero", "random"],
        default="trained",
        help="the trained policy, or a zero / uniform random baseline",
    )
    execution_arguments(p)
    p.add_argument(
        "--save-failures",
        metavar="DIR",
        help="save the env state about --before-s seconds before each failed episode's end "
        "into DIR (.npz files and index.json), for --from-states or a recovery demonstration",
    )
    p.add_argument(
        "--before-s",
        type=float,
        default=1.0,
        help="how long before a failure its state is saved (s; default 1.0)",
    )
    p.add_argument(
        "--from-states",
        metavar="PATH",
        help="start every env from stored env states (a directory --save-failures wrote, or "
        "one .npz) instead of a reset: a targeted evaluation",
    )
    alert_arguments(p)
    p.add_argument(
        "--alert-sweep",
        action="store_true",
        help="--alerts: also score each rule alone at other thresholds (P(success) 0.05-0.6, "
        "stall 1-8 s) on the same episodes, replayed from the recorded predictions: a "
        "precision-recall sweep in the report's alerts.sweep",
    )
    p.add_argument("--out", help="write the JSON here instead of to stdout")
    add_overrides(p, target="RUN")


def _run(args: argparse.Namespace) -> int:
    from unilab.deploy.evaluate import evaluate
    from unilab.deploy.sim_task import configs_for_policy

    target, overrides = split_items(args.items, "eval", "run directory or policy.onnx")
    policy = apply_inference_settings(args, load_target(target, "eval"))
    apply_flow_steps(args, policy)
    seeds = parse_seeds(args.seeds)
    meta = policy.metadata
    task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, overrides)
    if args.before_s < 0:
        raise ConfigError(f"--before-s {args.before_s} must be >= 0 seconds")
    states = None
    if args.from_states:
        from unilab.deploy.failure_states import load_states

        try:
            states = load_states(args.from_states)
        except (OSError, ValueError) as err:
            raise ConfigError(f"--from-states {args.from_states}: {err}") from None
    alerts = alert_options(args, policy)
    if args.alert_sweep:
        if alerts is None:
            raise ConfigError("--alert-sweep needs --alerts")
        from dataclasses import replace

        from unilab.deploy.live_alerts import SWEEP_DEFAULT_STALL_S, SWEEP_DEFAULT_THRESHOLDS

        alerts = replace(
            alerts,
            sweep_thresholds=SWEEP_DEFAULT_THRESHOLDS,
            sweep_stall_s=SWEEP_DEFAULT_STALL_S,
        )
    report = evaluate(
        policy,
        task_cfg,
        sim_cfg,
        episodes=positive(args.episodes, "--episodes"),
        seeds=seeds,
        kind=args.policy,
        save_failures=args.save_failures,
        before_s=args.before_s,
        start_states=states,
        start_source=args.from_states or "",
        alerts=alerts,
        **execution_options(args),  # type: ignore[arg-type]
    )
    text = json.dumps(report, indent=2) + "\n"
    r = report["return"]
    rate = report["success_rate"]
    print(
        f"{report['task']} / {args.policy}: return {r['mean']:.3f} ± {r['std']:.3f} over "
        f"{report['num_episodes']} episodes; length {report['length']['mean']:.1f}; "
        f"success {'n/a' if rate is None else f'{rate:.2f}'}; "
        f"ends {report['termination_reasons']}"
        + "".join(f"; {k} {v:.4g}" for k, v in report.get("metrics", {}).items()),
        file=sys.stderr,
    )
    if "alerts" in report:
        a = report["alerts"]
        print(
            f"alerts: precision {_num(a['precision'])}, recall {_num(a['recall'])}, lead "
            f"mean {_num(a['mean_lead_s'])} s / median {_num(a['median_lead_s'])} s over "
            f"{a['failed_episodes']} failed episodes ({a['alerted_episodes']} alerted)",
            file=sys.stderr,
        )
    if "failure_states" in report:
        saved = report["failure_states"]
        print(f"failure states: {saved['count']} in {saved['dir']}", file=sys.stderr)
    if args.out:
        from unilab.utils.atomic import atomic_write_text

        atomic_write_text(args.out, text)
        print(f"eval report: {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


VERBS = [
    Verb(
        "eval",
        "evaluate a policy over seeds; write JSON",
        _run,
        _arguments,
        description="Run N episodes per seed (one per env, so short episodes are not "
        "over-counted); report mean and std of return and length, success rate and "
        "termination reasons as JSON (schema unilab.eval/1, unilab/deploy/evaluate.py). "
        "Chunked policies (the VLA) execute n_act actions per chunk (--n-act, "
        "--ensemble-decay); the flow's noise of each seed's episodes comes from that seed. "
        "--alerts (runs with value heads) raises live failure alerts from the policy's "
        "predicted success and progress and reports their precision, recall and lead time.",
        order=12,
    )
]
