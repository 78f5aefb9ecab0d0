"""`unilab play` and `unilab viz`: run a policy in simulation; write video and Rerun files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.cli.options import add_overrides, output_base, positive, split_items
from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError

if TYPE_CHECKING:
    from unilab.deploy.failure_alerts import Alert
    from unilab.deploy.live_alerts import AlertOptions
    from unilab.deploy.policy_source import LoadedPolicy


def execution_arguments(p: argparse.ArgumentParser) -> None:
    """How a chunked policy (the VLA) executes its chunks."""
    p.add_argument(
        "--n-act",
        type=int,
        default=None,
        help="chunked policies: actions executed per chunk before re-planning (default: "
        "the policy's own n_act)",
    )
    p.add_argument(
        "--ensemble-decay",
        type=float,
        default=None,
        help="chunked policies: temporal ensembling with weights exp(-m i) (ACT; default: "
        "the policy's own setting, usually off)",
    )
    p.add_argument(
        "--flow-steps",
        type=int,
        default=None,
        help="flow VLAs loaded from a run: Euler steps per chunk (default: the K it was "
        "trained with; an exported policy.onnx keeps its own)",
    )
    p.add_argument(
        "--inference-settings",
        metavar="FILE",
        help="chunked policies: a `unilab tune-inference` report (its recommended settings) "
        "or a JSON object {setting: value} (n_act, ensemble_decay, flow_steps, "
        "noise_temperature, guidance_scale, best_of_n); instead of --n-act, "
        "--ensemble-decay and --flow-steps",
    )


def apply_inference_settings(args: argparse.Namespace, policy: LoadedPolicy) -> LoadedPolicy:
    """`policy` executing with `--inference-settings` (unchanged without it); settings the
    policy cannot use, or the flags they replace given too, are a ConfigError."""
    if not args.inference_settings:
        return policy
    given = [
        flag
        for flag, value in (
            ("--n-act", args.n_act),
            ("--ensemble-decay", args.ensemble_decay),
            ("--flow-steps", args.flow_steps),
        )
        if value is not None
    ]
    if given:
        raise ConfigError(
            f"--inference-settings sets how chunks execute; drop {', '.join(given)} (or put "
            "the value in the settings file)"
        )
    from unilab.cli.export import read_settings
    from unilab.deploy.tune_inference import TuneError, with_checked_settings

    settings = read_settings(args.inference_settings)
    try:
        return with_checked_settings(policy, settings)
    except TuneError as exc:
        raise ConfigError(f"--inference-settings {args.inference_settings}: {exc}") from None


def apply_flow_steps(args: argparse.Namespace, policy: LoadedPolicy) -> None:
    """`--flow-steps` on the loaded policy; a policy it cannot apply to is a ConfigError."""
    if args.flow_steps is None:
        return
    from unilab.deploy.policy_source import PolicyLoadError, set_flow_steps

    try:
        set_flow_steps(policy, args.flow_steps)
    except PolicyLoadError as exc:
        raise ConfigError(f"--flow-steps: {exc}") from None


def execution_options(args: argparse.Namespace) -> dict[str, float | int | None]:
    """The keyword arguments of play/evaluate for `execution_arguments`, checked."""
    if args.n_act is not None and args.n_act < 1:
        raise ConfigError(f"--n-act={args.n_act} must be at least 1")
    if args.ensemble_decay is not None and args.ensemble_decay != args.ensemble_decay:
        raise ConfigError("--ensemble-decay must be a number")
    return {"n_act": args.n_act, "ensemble_decay": args.ensemble_decay}


def alert_arguments(p: argparse.ArgumentParser) -> None:
    """Live failure alerts from a VLA's value heads (unilab.deploy.live_alerts)."""
    p.add_argument(
        "--alerts",
        action="store_true",
        help="VLA runs with value heads: raise failure alerts from the policy's predicted "
        "success and progress at each re-plan",
    )
    p.add_argument(
        "--alert-threshold",
        type=float,
        default=0.5,
        help="--alerts: alert when predicted P(success) falls below this (default 0.5)",
    )
    p.add_argument(
        "--alert-stall-s",
        type=float,
        default=5.0,
        help="--alerts: alert when predicted progress has not risen for this long (s; default 5.0)",
    )


def alert_options(args: argparse.Namespace, policy: LoadedPolicy) -> AlertOptions | None:
    """The checked `AlertOptions` of `alert_arguments` (None without --alerts); a
    ConfigError for a policy without value heads."""
    from unilab.deploy.live_alerts import AlertOptions, NoValueHeadsError, value_policy

    if not args.alerts:
        return None
    options = AlertOptions(float(args.alert_threshold), float(args.alert_stall_s))
    try:
        options.check()
        value_policy(policy.policy)
    except (NoValueHeadsError, ValueError) as exc:
        raise ConfigError(f"--alerts: {exc}") from None
    return options


def rollout_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--episodes", type=int, default=1, help="episodes to run")
    p.add_argument(
        "--envs",
        type=int,
        default=0,
        help="envs stepped together (default: one per episode, at most 4); env 0 is "
        "filmed and recorded",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated task")
    p.add_argument(
        "--noise-seed",
        type=int,
        default=None,
        help="chunked policies: seed of the flow's sampling noise (default: --seed)",
    )
    execution_arguments(p)
    alert_arguments(p)
    p.add_argument(
        "--takeover-after",
        type=float,
        default=None,
        metavar="S",
        help="HIL in simulation: the task's scripted expert takes over every episode still "
        "running after S seconds; with record=, its frames are stored as interventions",
    )
    p.add_argument(
        "--takeover-on-error",
        action="store_true",
        help="HIL in simulation: the expert also takes over as soon as it sees the policy "
        "make a mistake (pick-and-place tasks: a missed grasp)",
    )
    p.add_argument(
        "--spawn", action="store_true", help="open the Rerun viewer instead of an .rrd file"
    )
    p.add_argument(
        "--out", help="output base directory; files go to <out>/media/ (default: the run)"
    )
    p.add_argument("--name", help="file name stem of the outputs")
    p.add_argument("--width", type=int, default=640, help="video width in pixels")
    p.add_argument("--height", type=int, default=480, help="video height in pixels")
    add_overrides(p, target="RUN")


def load_target(target: str | None, verb: str) -> LoadedPolicy:
    """The policy of a run directory or a policy.onnx; unusable input is a ConfigError."""
    from unilab.deploy.policy_source import PolicyLoadError, load_policy
    from unilab.export.metadata import MetadataError

    if not target:
        raise ConfigError(f"unilab {verb} needs a run directory or a policy.onnx")
    try:
        return load_policy(Path(target))
    except (PolicyLoadError, MetadataError) as exc:
        raise ConfigError(str(exc)) from None


EXPERT = "expert"
"""The play target that runs a task's scripted expert: `unilab play expert task=NAME`."""


def _expert_configs(items: list[str], verb: str) -> tuple[object, object]:
    from unilab.config.compose import compose

    bad = [t for t in items if not t.split("=", 1)[0].startswith(("task", "sim."))]
    if bad or not any(t.startswith("task=") for t in items):
        raise ConfigError(
            f"unilab {verb} expert needs task=NAME (and takes task.* / sim.* overrides); "
            f"got {items}"
        )
    cfg = compose(items)
    return cfg.task, cfg.sim


def _play_like(args: argparse.Namespace, verb: str, default_name: str, video: bool) -> int:
    target, items = split_items(args.items, verb, "run directory, policy.onnx or 'expert'")
    from unilab.deploy.play import ExpertSource, play
    from unilab.deploy.sim_task import configs_for_policy

    record = [t.split("=", 1)[1] for t in items if t.startswith("record=")]
    overrides = [t for t in items if not t.startswith("record=")]
    policy: LoadedPolicy | ExpertSource
    alerts = None
    if args.takeover_after is not None and not args.takeover_after >= 0:
        raise ConfigError(f"--takeover-after={args.takeover_after} must be seconds >= 0")
    if target == EXPERT:
        if args.alerts:
            raise ConfigError(f"unilab {verb} expert: --alerts needs a policy with value heads")
        if args.flow_steps is not None:
            raise ConfigError(f"unilab {verb} expert: --flow-steps needs a flow policy")
        if args.takeover_after is not None or args.takeover_on_error:
            raise ConfigError(
                f"unilab {verb} expert: --takeover-after / --takeover-on-error need a policy "
                "to take over from"
            )
        policy = ExpertSource()
        task_cfg, sim_cfg = _expert_configs(overrides, verb)
        task_name = task_cfg.name  # type: ignore[attr-defined]
        out = Path(args.out) if args.out else Path("runs") / EXPERT / task_name
        stem = "expert"
    else:
        policy = apply_inference_settings(args, load_target(target, verb))
        apply_flow_steps(args, policy)
        alerts = alert_options(args, policy)
        assert target is not None
        meta = policy.metadata
        task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, overrides)
        task_name = meta.task
        out = Path(args.out) if args.out else output_base(Path(target))
        stem = Path(policy.source).stem
    name = args.name or default_name.format(ckpt=stem, seed=args.seed, task=task_name)
    result = play(
        policy,
        task_cfg,  # type: ignore[arg-type]
        sim_cfg,  # type: ignore[arg-type]
        out / "media",
        name,
        episodes=positive(args.episodes, "--episodes"),
        num_envs=positive(args.envs, "--envs") if args.envs else None,
        seed=args.seed,
        video=video,
        rerun=True,
        spawn=args.spawn,
        width=args.width,
        height=args.height,
        record=record[-1] if record else None,
        noise_seed=args.noise_seed,
        alerts=alerts,
        on_alert=_print_alert if alerts is not None else None,
        takeover_after_s=args.takeover_after,
        takeover_on_error=args.takeover_on_error,
        **execution_options(args),  # type: ignore[arg-type]
    )
    if record:
        print(f"recorded {len(result.recorded_episodes)} episodes to {record[-1]}")
    if args.takeover_after is not None or args.takeover_on_error:
        taken = [e for e in result.episodes if e["intervened"]]
        rescued = sum(bool(e["success"]) for e in taken)
        print(f"the expert took over {len(taken)} episodes ({rescued} rescued)")
    for note in result.notes:
        print(f"unilab {verb}: {note}", file=sys.stderr)
    returns = [round(e["return"], 4) for e in result.episodes]
    print(f"{len(result.episodes)} episodes, returns {returns}, {result.steps} steps")
    if alerts is not None:
        print(f"{len(result.alerts)} failure alerts (listed in the summary)")
    for label, path in (("video", result.video), ("recording", result.rrd)):
        if path:
            print(f"{label}: {path}")
    print(f"summary: {out / 'media' / (name + '.json')}")
    return 0


def _print_alert(alert: Alert) -> None:
    from unilab.deploy.live_alerts import format_alert

    print(format_alert(alert), file=sys.stderr, flush=True)


def _play_arguments(p: argparse.ArgumentParser) -> None:
    rollout_arguments(p)
    p.add_argument("--no-video", action="store_true", help="skip the mp4")


def _viz_arguments(p: argparse.ArgumentParser) -> None:
    rollout_arguments(p)
    p.add_argument("--video", action="store_true", help="also write an mp4")


VERBS = [
    Verb(
        "play",
        "run a policy in simulation; write video and a Rerun recording",
        lambda args: _play_like(args, "play", "play_{ckpt}_seed{seed}", video=not args.no_video),
        _play_arguments,
        description="Run a policy in simulation for N episodes; write <out>/media/<name>.mp4 "
        "(set MUJOCO_GL=egl on headless machines), <name>.rrd (Rerun) and <name>.json. "
        "task.* and sim.* key=value overrides change the simulated task; record=<store> "
        "appends the finished episodes to an episode store. `unilab play expert "
        "task=arm_pick_place` plays the task's scripted expert (episodes seeded --seed, "
        "--seed + 1, ... as unilab collect seeds them; outputs in runs/expert/<task>/media). "
        "Tasks that observe cameras show those views beside the scene in the mp4 and as "
        "cameras/<cam> images in the .rrd.",
        order=10,
    ),
    Verb(
        "viz",
        "write (or --spawn) a Rerun recording of a run's newest checkpoint",
        lambda args: _play_like(args, "viz", "viz_{ckpt}", video=args.video),
        _viz_arguments,
        description="Record one episode of the newest good checkpoint into the run's media "
        "directory as viz_<checkpoint>.rrd, or stream it to a viewer with --spawn.",
        order=11,
    ),
]
