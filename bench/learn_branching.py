"""`python -m bench.learn_branching`: rollouts with and without branching on a sparse reward.

arm_reach rewarded only while the end effector is within 2 cm of the target
(`task.reward_weights`: success 1, the shaped tracking terms 0). One arm trains on plain
rollouts; the other forks groups of `--k` envs from their leader's state every `--every`
steps (`runtime.branching_k/every`) and scores siblings against their group's mean return
at the branch point (`algo.group_baseline`). Same budget, seeds and evaluation as
`bench.learn_allocation` (evaluation success on fresh envs; env steps and wall seconds to
`--target`). Writes JSON and a PNG of evaluation success against env steps.
"""

from __future__ import annotations

import argparse
import sys

from unilab.bench.learn_allocation import compare_arms

DEFAULT_OUT = "bench/results/learn_branching.json"
SPARSE = [
    "task.reward_weights.success=1.0",
    "task.reward_weights.tracking=0.0",
    "task.reward_weights.tracking_fine=0.0",
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.learn_branching", description=__doc__)
    p.add_argument("--task", default="arm_reach")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=600_000, help="env steps per run")
    p.add_argument("--k", type=int, default=4, help="envs per branching group")
    p.add_argument("--every", type=int, default=50, help="leader steps between forks")
    p.add_argument("--group-baseline", type=float, default=0.5)
    p.add_argument("--target", type=float, default=0.5, help="evaluation success to reach")
    p.add_argument("--eval-every", type=int, default=8, help="learner iterations")
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("overrides", nargs="*", help="more key=value config overrides")
    args = p.parse_args(argv)
    arms = {
        "plain": SPARSE,
        "branching": [
            *SPARSE,
            f"runtime.branching_k={args.k}",
            f"runtime.branching_every={args.every}",
            f"algo.group_baseline={args.group_baseline}",
        ],
    }
    compare_arms(args, arms, "bench.learn_branching", argv, {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
