"""`unilab bench learn_arm_reach`: arm_reach on its preset; the fraction of evaluation
episodes that end with the end effector within 2 cm of the target, checkpoint by
checkpoint. The target: >= 95 % success within 10 minutes of wall time (bench/learn_arm.py
says how training and evaluation run)."""

from __future__ import annotations

from unilab.bench.learn_arm import ArmBench, run_bench

BENCH = ArmBench(
    name="learn_arm_reach",
    task="arm_reach",
    target_success=0.95,
    target_minutes=10.0,
    success_label="episodes ending within 2 cm",
)


def main(argv: list[str] | None = None) -> int:
    return run_bench(BENCH, argv, __doc__.split("\n")[0])


if __name__ == "__main__":
    raise SystemExit(main())
