"""`unilab bench learn_quadruped_rough`: train quadruped_joystick_rough on its preset for a
wall-clock budget (`--minutes`, default 60); report the curriculum level the training
reached (`task/terrain_level`, the training envs' mean level) against the hardest level of
the terrain, and the tracking at a commanded 0.5 m/s with every evaluation env pinned to
that hardest level (96 envs, 16 per terrain kind, x 10 s): mean |v_x - 0.5| after the first
second, target <= 0.25 m/s. The same bench as `unilab bench learn_locomotion --task
quadruped_joystick_rough` (bench/learn_locomotion.py); writes
bench/results/learn_quadruped_rough.json and .png.
"""

from __future__ import annotations

from unilab.bench.learn_locomotion import main_for


def main(argv: list[str] | None = None) -> int:
    return main_for("quadruped_joystick_rough", "learn_quadruped_rough", argv)


if __name__ == "__main__":
    raise SystemExit(main())
