"""`unilab bench learn_quadruped`: train quadruped_joystick_flat on its preset for a
wall-clock budget (`--minutes`, default 25), then measure how well the final policy walks
at a commanded 0.5 m/s: mean |v_x - 0.5| after the first second over 32 envs x 10 s,
deterministic, target <= 0.2 m/s; falls are counted. The same bench as
`unilab bench learn_locomotion --task quadruped_joystick_flat` (bench/learn_locomotion.py
says how training and evaluation run); writes bench/results/learn_quadruped.json and .png.
"""

from __future__ import annotations

from unilab.bench.learn_locomotion import main_for


def main(argv: list[str] | None = None) -> int:
    return main_for("quadruped_joystick_flat", "learn_quadruped", argv)


if __name__ == "__main__":
    raise SystemExit(main())
