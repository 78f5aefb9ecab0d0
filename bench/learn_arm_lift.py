"""`unilab bench learn_arm_lift`: arm_lift_cube on its preset; the fraction of evaluation
episodes that end with the cube held at least `task.success_height` (15 cm) above the
table, checkpoint by checkpoint. The target: >= 90 % success within 30 minutes of wall time
(bench/learn_arm.py says how training and evaluation run)."""

from __future__ import annotations

from unilab.bench.learn_arm import ArmBench, run_bench

BENCH = ArmBench(
    name="learn_arm_lift",
    task="arm_lift_cube",
    target_success=0.90,
    target_minutes=30.0,
    success_label="episodes ending with the cube above 15 cm",
)


def main(argv: list[str] | None = None) -> int:
    return run_bench(BENCH, argv, __doc__.split("\n")[0])


if __name__ == "__main__":
    raise SystemExit(main())
