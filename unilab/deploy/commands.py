"""The `play`, `eval`, `export`, `viz` and `deploy` verbs behind `unilab.cli`.

Each takes the parsed arguments, turns bad input into one `ConfigError` (the CLI prints it
and exits 2) and returns the exit code. Heavy modules load inside each verb: `deploy`
never imports torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.config.errors import ConfigError

if TYPE_CHECKING:
    from unilab.deploy.policy_source import LoadedPolicy


@contextmanager
def _bad_input() -> Iterator[None]:
    """Known input problems (missing files, bad metadata, unusable runs) → ConfigError."""
    from unilab.deploy.policy_source import PolicyLoadError
    from unilab.export.metadata import MetadataError

    try:
        yield
    except (PolicyLoadError, MetadataError) as exc:
        raise ConfigError(str(exc)) from None


def _base_dir(target: Path) -> Path:
    """Where outputs go by default: the run directory for a run or its export/policy.onnx,
    else the folder holding the policy file."""
    if target.is_dir():
        return target.parent if target.name == "export" else target
    parent = target.parent
    return parent.parent if parent.name == "export" else parent


def _positive(value: int, flag: str) -> int:
    if value < 1:
        raise ConfigError(f"{flag}={value} must be at least 1")
    return value


def _parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(
            f"--seeds {text!r} must be comma-separated integers, e.g. 0,1,2"
        ) from None
    if not seeds:
        raise ConfigError("--seeds must name at least one seed, e.g. 0,1,2")
    return seeds


def _load(target: str | None, verb: str) -> LoadedPolicy:
    from unilab.deploy.policy_source import load_policy

    if not target:
        raise ConfigError(f"unilab {verb} needs a run directory or a policy.onnx")
    with _bad_input():
        return load_policy(Path(target))


def cmd_export(args: argparse.Namespace) -> int:
    from unilab.export.run_export import export_run
    from unilab.export.run_policy import RunDirError

    if not args.target:
        raise ConfigError("unilab export needs a run directory")
    try:
        paths = export_run(Path(args.target), Path(args.out) if args.out else None)
    except RunDirError as exc:
        raise ConfigError(str(exc)) from None
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


def _play_like(args: argparse.Namespace, verb: str, default_name: str, video: bool) -> int:
    from unilab.deploy.play import play
    from unilab.deploy.sim_task import configs_for_policy

    policy = _load(args.target, verb)
    meta = policy.metadata
    record = [t.split("=", 1)[1] for t in args.overrides if t.startswith("record=")]
    overrides = [t for t in args.overrides if not t.startswith("record=")]
    task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, overrides)
    out = Path(args.out) if args.out else _base_dir(Path(args.target))
    name = args.name or default_name.format(
        ckpt=Path(policy.source).stem, seed=args.seed, task=meta.task
    )
    result = play(
        policy,
        task_cfg,
        sim_cfg,
        out / "media",
        name,
        episodes=_positive(args.episodes, "--episodes"),
        num_envs=_positive(args.envs, "--envs") if args.envs else None,
        seed=args.seed,
        video=video,
        rerun=True,
        spawn=args.spawn,
        width=args.width,
        height=args.height,
        record=record[-1] if record else None,
    )
    if record:
        print(f"recorded {len(result.recorded_episodes)} episodes to {record[-1]}")
    for note in result.notes:
        print(f"unilab {verb}: {note}", file=sys.stderr)
    returns = [round(e["return"], 4) for e in result.episodes]
    print(f"{len(result.episodes)} episodes, returns {returns}, {result.steps} steps")
    for label, path in (("video", result.video), ("recording", result.rrd)):
        if path:
            print(f"{label}: {path}")
    print(f"summary: {out / 'media' / (name + '.json')}")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    return _play_like(args, "play", "play_{ckpt}_seed{seed}", video=not args.no_video)


def cmd_viz(args: argparse.Namespace) -> int:
    return _play_like(args, "viz", "viz_{ckpt}", video=args.video)


def cmd_eval(args: argparse.Namespace) -> int:
    from unilab.deploy.evaluate import evaluate
    from unilab.deploy.sim_task import configs_for_policy

    policy = _load(args.target, "eval")
    seeds = _parse_seeds(args.seeds)
    meta = policy.metadata
    task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, args.overrides)
    report = evaluate(
        policy,
        task_cfg,
        sim_cfg,
        episodes=_positive(args.episodes, "--episodes"),
        seeds=seeds,
        kind=args.policy,
    )
    text = json.dumps(report, indent=2) + "\n"
    r = report["return"]
    rate = report["success_rate"]
    print(
        f"{report['task']} / {args.policy}: return {r['mean']:.3f} ± {r['std']:.3f} over "
        f"{report['num_episodes']} episodes; length {report['length']['mean']:.1f}; "
        f"success {'n/a' if rate is None else f'{rate:.2f}'}; "
        f"ends {report['termination_reasons']}",
        file=sys.stderr,
    )
    if args.out:
        from unilab.utils.atomic import atomic_write_text

        atomic_write_text(args.out, text)
        print(f"eval report: {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    from unilab.deploy.loop import EXIT_SAFETY_STOP, run_deploy
    from unilab.deploy.onnx_policy import OnnxPolicy
    from unilab.deploy.sim_robot import SimRobot
    from unilab.export.metadata import MetadataError

    if not args.target or not args.target.endswith(".onnx"):
        raise ConfigError("unilab deploy needs an exported policy.onnx (torch is not used here)")
    try:
        policy = OnnxPolicy(Path(args.target))
    except MetadataError as exc:
        raise ConfigError(str(exc)) from None
    kind, _, task_name = (args.robot or "").partition(":")
    if kind != "sim" or not task_name:
        raise ConfigError(
            f"--robot {args.robot!r}: only simulated robots exist so far; use sim:<task>, "
            f"e.g. sim:{policy.metadata.task}"
        )
    meta = policy.metadata
    robot = SimRobot.for_policy(meta, task_name, seed=args.seed)
    try:
        dims = robot.obs_dims
        if dims.get(meta.obs_group) != meta.obs_dim or robot.action_dim != meta.action_dim:
            raise ConfigError(
                f"policy expects {meta.obs_group} observations of width {meta.obs_dim} and "
                f"{meta.action_dim} actions; sim:{task_name} has {dims} and {robot.action_dim}"
            )
        if args.speed <= 0:
            raise ConfigError(f"--speed={args.speed} must be positive")
        robot.reset()
        report = run_deploy(
            policy,
            robot,
            obs_group=meta.obs_group,
            action_dim=meta.action_dim,
            action_clip=meta.action_clip,
            steps=_positive(args.steps, "--steps"),
            speed=args.speed,
            max_action=args.max_action,
        )
    finally:
        robot.close()
    text = json.dumps(report.to_dict(), indent=2) + "\n"
    if args.out:
        from unilab.utils.atomic import atomic_write_text

        atomic_write_text(args.out, text)
    print(
        f"deploy {report.stop_reason}: {report.steps} steps at {1e3 * report.period_s:.2f} ms; "
        f"period error mean {report.period_error_mean_ms:.3f} ms, "
        f"p99 {report.period_error_p99_ms:.3f} ms; overruns {report.overruns}"
        + (f"; {report.detail}; held {report.held_action}" if report.detail else ""),
        file=sys.stderr,
    )
    if not args.out:
        sys.stdout.write(text)
    if report.stop_reason == "bad_action":
        return EXIT_SAFETY_STOP
    return 0 if report.ok else 130
