"""`unilab deploy`: an exported policy.onnx against a robot at its control rate, no torch.

Nothing here (or in what it imports) may load torch: the deploy side runs on onnxruntime.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from unilab.cli.options import positive
from unilab.cli.verb import Verb
from unilab.config.errors import ConfigError


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("policy", nargs="?", help="exported policy.onnx")
    p.add_argument("--robot", default="", help="sim:<task> (a simulated robot)")
    p.add_argument("--steps", type=int, default=1000, help="control steps to run")
    p.add_argument("--seed", type=int, default=0, help="seed of a simulated robot")
    p.add_argument(
        "--speed", type=float, default=1.0, help="run this many times faster than real time"
    )
    p.add_argument(
        "--max-action",
        type=float,
        default=None,
        help="stop on |action| above this (default: 3 x the task's action clip)",
    )
    p.add_argument(
        "--noise-seed", type=int, default=None, help="a VLA's sampling noise seed (default: --seed)"
    )
    p.add_argument(
        "--n-act", type=int, default=None, help="a VLA's actions per chunk (default: exported)"
    )
    p.add_argument(
        "--ensemble-decay",
        type=float,
        default=None,
        help="a VLA's temporal ensembling decay (default: as exported)",
    )
    p.add_argument("--out", help="write the JSON report here instead of to stdout")


def _run(args: argparse.Namespace) -> int:
    from unilab.deploy.loop import SafetyLimits, run_deploy
    from unilab.deploy.onnx_policy import OnnxPolicy
    from unilab.deploy.onnx_session import is_vla, open_session
    from unilab.deploy.sim_robot import SimRobot
    from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy
    from unilab.export.metadata import MetadataError

    if not args.policy or not args.policy.endswith(".onnx"):
        raise ConfigError("unilab deploy needs an exported policy.onnx (torch is not used here)")
    if args.speed <= 0:
        raise ConfigError(f"--speed={args.speed} must be positive")
    steps = positive(args.steps, "--steps")
    if args.n_act is not None:
        positive(args.n_act, "--n-act")
    vla: OnnxVLAPolicy | None = None
    try:
        session = open_session(Path(args.policy))
        if is_vla(session):
            vla = OnnxVLAPolicy(Path(args.policy), session=session)
            if vla.robot is None:
                raise ConfigError(
                    f"{args.policy} is a VLA exported without robot metadata; export the "
                    "run with `unilab export RUN`"
                )
            meta = vla.robot
        else:
            policy = OnnxPolicy(Path(args.policy), session=session)
            meta = policy.metadata
    except MetadataError as exc:
        raise ConfigError(str(exc)) from None
    kind, _, task_name = (args.robot or "").partition(":")
    if kind != "sim" or not task_name:
        raise ConfigError(
            f"--robot {args.robot!r}: only simulated robots exist so far; use sim:<task>, "
            f"e.g. sim:{meta.task}"
        )
    robot = SimRobot.for_policy(meta, task_name, seed=args.seed)
    try:
        dims = robot.obs_dims
        if dims.get(meta.obs_group) != meta.obs_dim or robot.action_dim != meta.action_dim:
            raise ConfigError(
                f"policy expects {meta.obs_group} observations of width {meta.obs_dim} and "
                f"{meta.action_dim} actions; sim:{task_name} has {dims} and {robot.action_dim}"
            )
        step_fn: Any = policy if vla is None else _vla_step(vla, robot, args)
        robot.reset()
        report = run_deploy(
            step_fn,
            robot,
            obs_group=meta.obs_group,
            action_dim=meta.action_dim,
            action_clip=meta.action_clip,
            steps=steps,
            speed=args.speed,
            limits=SafetyLimits.from_metadata(meta, max_action=args.max_action),
            full_observation=vla is not None,
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
    return report.exit_code


def _vla_step(vla: Any, robot: Any, args: argparse.Namespace) -> Any:
    """The exported VLA as a per-step policy of the deploy loop, after checking that the
    simulated robot observes the cameras and instruction it reads."""
    from unilab.deploy.vla_deploy import VLAStepPolicy

    have = {k: tuple(v.shape) for k, v in robot.task.observation_spec().items()}
    wrong = {k: s for k, s in vla.obs_shapes.items() if have.get(k) != s}
    if wrong:
        raise ConfigError(
            f"the VLA reads {vla.obs_shapes}; the simulated robot observes {have} "
            f"(mismatched: {sorted(wrong)})"
        )
    seed = args.seed if args.noise_seed is None else args.noise_seed
    return VLAStepPolicy(
        vla, robot, seed=seed, n_act=args.n_act, ensemble_decay=args.ensemble_decay
    )


VERBS = [
    Verb(
        "deploy",
        "run an exported policy.onnx against a robot at its control rate",
        _run,
        _arguments,
        description="Control loop on onnxruntime alone (no torch): observe, infer, check, "
        "act at the policy's control rate; reports loop jitter. A non-finite or too large "
        "action is never sent: the last safe action is held and the loop stops (exit 4). "
        "An exported VLA (bc_flow, bc_mse) runs its chunks the same way as play and eval: "
        "n_act actions per chunk, optional temporal ensembling, noise from --noise-seed.",
        order=30,
    )
]
