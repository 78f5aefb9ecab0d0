"""`unilab bench <name> [its options]`: run a benchmark from bench/ (prints a table, writes
JSON, default bench/results/<name>.json). Each benchmark parses its own options:
`unilab bench sim --help`."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

from unilab.cli.verb import NotAvailableError, Verb

BENCHMARKS = {
    "sim": "raw mujoco.batch ceiling vs unilab task stepping vs gymnasium vector envs",
    "runtime": "collection throughput vs the ceiling; sync vs async overlap",
    "e2e": "time to a target return: unilab async, sync, Stable-Baselines3",
    "scaling": "env steps/s against workers, envs per worker and threads",
    "learn_arm_reach": "arm_reach with PPO: wall time to 95 % evaluated success",
    "learn_arm_lift": "arm_lift_cube with PPO: wall time to 90 % evaluated lift success",
    "learn_quadruped": "quadruped_joystick_flat: velocity error at 0.5 m/s after a time budget",
    "learn_humanoid": "humanoid_walk: velocity error at 0.5 m/s and fall rate over 100 episodes",
    "learn_quadruped_rough": "quadruped_joystick_rough: curriculum level reached, velocity error on the hardest level",
    "learn_locomotion": "learn_quadruped / learn_humanoid / learn_quadruped_rough chosen by --task",
    "learn_ant": "gymnasium ant.xml via the mjcf task: PPO and SAC return curves",
    "hil": "HIL link: key/replay/fuzz security, link-loss safe stop, 5-min scripted session",
    "learn_vla": "tabletop imitation (bc_flow/bc_mse): in-sim success after a time budget",
    "learn_flow_ppo": "flow_ppo from one bc_flow run, with vs without tokens: success per env step",
    "failure_alerts": "a VLA's failure alerts on sim rollouts: precision vs failure rate, recall, lead time, threshold sweep",
    "value_heads": "a VLA's value heads on held-out episodes: Brier, reliability, progress Spearman",
    "tokens": "exploration tokens: path coverage with vs without; selector vs fixed tokens",
    "tune_inference": "Thompson-tuned inference settings vs the policy's defaults, several tuner seeds",
    "improve_loop": "unilab improve from bc_flow bases: expert takeovers / own rollouts vs demos-only control",
    "vla": "flow VLA: training samples/s, chunk latency (torch, onnxruntime), peak memory",
    "render": "camera rendering: per-env vs tiled frames/s; stepping with cameras vs the ceiling",
    "experts": "scripted experts of the tabletop tasks: success over 200 episodes, mode distances",
    "ray_hosts": "Ray rollout hosts on a stand-in cluster: per-chunk transport, learner cost, steps/s vs hosts",
    "env_state": "one env's save + restore (branching rollouts) against one step of the batch",
    "learn_allocation": "reset bins: uniform vs Thompson allocation, env steps to a target success",
    "learn_branching": "sparse-reward arm_reach: branching rollouts vs plain, env steps to a target",
    "wm_fidelity": "world model: open-loop error vs horizon against copy-last-frame, held-out episodes",
    "wm_filter": "world model: consistency filter precision/recall against the simulator; generated vs simulated frames/s",
    "wm_failures": "world model: predicted success on failure episodes, trained with vs without failure rollouts",
    "wm_gain": "world model: a VLA improved on real rollouts only vs real + synthetic, equal real budget",
    "segment_critic": "segmentation critic: label accuracy on known segments; BC curated vs all",
    "fleet": "fleet server with 12 simulated robots: server CPU, update latency p99, dashboard",
    "report": "write BENCHMARKS.md from bench/results/*.json",
}
MEASURED = ["sim", "runtime", "e2e", "scaling", "render", "vla"]
"""What `unilab bench all` runs (then `report`); learn_* and the long hil soak run by name."""


def run_benchmark(name: str, argv: list[str]) -> int:
    """Run bench/<name>.py's main(argv); its exit code."""
    try:
        module = importlib.import_module(f"unilab.bench.{name}")
    except ModuleNotFoundError as exc:
        if exc.name not in (f"unilab.bench.{name}", "unilab.bench"):
            raise
        raise NotAvailableError(
            f"benchmark {name!r} is not installed here: benchmarks ship with a source "
            "checkout (bench/), not with the package"
        ) from None
    return int(module.main(argv))


def _runner(name: str) -> Callable[[argparse.Namespace], int]:
    return lambda args: run_benchmark(name, list(args.rest))


def _run_all(args: argparse.Namespace) -> int:
    """The measuring benchmarks with the given options, then the report from their JSON."""
    codes = [run_benchmark(name, list(args.rest)) for name in MEASURED]
    return max([*codes, run_benchmark("report", [])])


VERBS = [
    Verb(
        "bench",
        "run a benchmark: " + ", ".join(BENCHMARKS) + ", or all",
        description=__doc__.split("\n\n")[0] if __doc__ else "",
        order=60,
    ),
    *(
        Verb(name, text, _runner(name), parent="bench", raw=True, order=i)
        for i, (name, text) in enumerate(BENCHMARKS.items())
    ),
    Verb(
        "all",
        f"run {', '.join(MEASURED)} in turn (options go to each), then report",
        _run_all,
        parent="bench",
        raw=True,
        order=len(BENCHMARKS),
    ),
]
