"""`unilab bench learn_humanoid`: train humanoid_walk on its preset for a wall-clock budget
(`--minutes`, default 60), then evaluate 100 deterministic episodes of 20 s at a commanded
0.5 m/s (the middle of the task's range [0, 1]): mean |v_x - 0.5| after the first second,
target <= 0.25 m/s, and the fall rate (episodes that end by termination before the time
limit), target <= 5 %. The same bench as `unilab bench learn_locomotion --task
humanoid_walk` (bench/learn_locomotion.py); writes bench/results/learn_humanoid.json and .png.
"""

from __future__ import annotations

from unilab.bench.learn_locomotion import main_for


def main(argv: list[str] | None = None) -> int:
    return main_for("humanoid_walk", "learn_humanoid", argv)


if __name__ == "__main__":
    raise SystemExit(main())
