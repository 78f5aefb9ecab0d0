"""`unilab bench experts`: the tabletop family's scripted experts over seeded episodes:
success rate per task and per mode, and how different the modes really are.

An episode's end-effector path is the pair of finger-pad centres at every control step (so
a turned wrist counts, not only where the fingertips go), resampled to 50 points over the
episode's own duration; the distance between two episodes is the mean distance between
their resampled points. Two ratios, "between modes" over "within a mode":

- unpaired: over all pairs of the successful seeded episodes (random scenes, random modes).
  Scene variation counts as "within", and a mode defined relative to the objects (which
  cube goes on top) can look like its mirror in another scene, so this ratio can sit near
  1 even for clearly different behaviours;
- paired: from the same start states (a few scenes, each run once per mode and twice per
  mode with fresh per-episode noise): same scene and mode vs same scene, other mode.

Per mode pair the mean distances are kept too (a grasp turn moves a path less than a bowl
choice). Cameras are off: experts read the state, and pixels would only cost time here.

`controller`: how the action space behaves (docs/decisions/0032): from the ready pose, a
constant action along one axis for 12 steps; the fingertip's (or hand yaw's) displacement
per step over the last 6 steps against the commanded one, the largest drift off the axis,
and how far the fingertip still moves in 10 steps of zero action after that.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np

from unilab.bench.common import machine_info, print_table, write_json
from unilab.config import compose
from unilab.tasks.experts import EXPERTS, ScriptedExpert, make_expert
from unilab.tasks.registry import make_task
from unilab.tasks.tabletop import TabletopTask
from unilab.tasks.tabletop_scene import FINGER_PADS

DEFAULT_OUT = "bench/results/experts.json"
TASKS = tuple(EXPERTS.names())
"""The tabletop family: every task with a scripted expert."""
PATH_POINTS = 50
TARGETS = {"success": 0.95, "mode_ratio": 1.0}


def make(name: str, num_envs: int, seed: int) -> tuple[TabletopTask, ScriptedExpert]:
    task = make_task(
        compose([f"task={name}", "task.cameras=[]"]).task, num_envs=num_envs, seed=seed
    )
    assert isinstance(task, TabletopTask)
    task.reset()
    return task, make_expert(task, seed=seed)


def collect(
    name: str, episodes: int, num_envs: int, seed: int, scenes: int = 0, repeats: int = 2
) -> dict[str, Any]:
    """Run the expert until `episodes` episodes ended; their success, mode, length, paths.

    scenes > 0: paired runs instead: num_envs = scenes * modes * repeats envs, every group
    of modes * repeats envs starting from one scene, each mode `repeats` times; one
    episode per env (episodes is ignored), and `scene` tells which scene a run had.
    """
    if scenes:
        task, expert = make(name, 1, seed)
        num_modes = expert.num_modes
        task.close()
        num_envs = scenes * num_modes * repeats
    task, expert = make(name, num_envs, seed)
    scene_of = np.arange(num_envs)
    if scenes:
        per_scene = expert.num_modes * repeats
        scene_of = np.arange(num_envs) // per_scene
        leaders = scene_of * per_scene
        snap = task.sim.snapshot()
        snap.state[:] = snap.state[leaders]
        task.sim.restore(snap)
        task.set_state({k: v[leaders] for k, v in task.get_state().items()})
        expert.reset(None, modes=np.tile(np.repeat(np.arange(expert.num_modes), repeats), scenes))
        episodes = num_envs
    finished = np.zeros(num_envs, dtype=bool)
    geom_xpos = task.sim.bind("geom_xpos")
    pads = [task.model.geom(p).id for p in FINGER_PADS]
    current: list[list[np.ndarray]] = [[] for _ in range(num_envs)]
    success: list[bool] = []
    modes: list[int] = []
    lengths: list[int] = []
    paths: list[np.ndarray] = []
    scene: list[int] = []
    start = time.perf_counter()
    steps = 0
    while len(success) < episodes:
        for env in range(num_envs):  # recording only; the expert and the task are batched
            current[env].append(geom_xpos[env, pads].copy())
        mode = expert.mode.copy()
        result = task.step(expert.act())
        steps += 1
        done = np.flatnonzero(result.terminated | result.truncated)
        if scenes:  # one episode per env
            done = done[~finished[done]]
            finished[done] = True
        for env in done.tolist():
            scene.append(int(scene_of[env]))
            success.append(bool(result.extras["success"][env]))
            modes.append(int(mode[env]))
            lengths.append(int(result.episode_length[env]))
            paths.append(resample(np.stack(current[env])))
            current[env] = []
        expert.reset(done)
    wall = time.perf_counter() - start
    task.close()
    return {
        "success": np.array(success[:episodes]),
        "modes": np.array(modes[:episodes]),
        "lengths": np.array(lengths[:episodes]),
        "paths": np.stack(paths[:episodes]),
        "scene": np.array(scene[:episodes]),
        "mode_names": list(expert.mode_names),
        "env_steps_per_s": steps * num_envs / wall,
    }


def resample(path: np.ndarray, points: int = PATH_POINTS) -> np.ndarray:
    """(T, pads, 3) -> (points, pads, 3), linear in normalized time."""
    t = np.linspace(0.0, 1.0, len(path))
    ts = np.linspace(0.0, 1.0, points)
    flat = path.reshape(len(path), -1)
    out = np.stack([np.interp(ts, t, flat[:, j]) for j in range(flat.shape[1])], axis=1)
    return out.reshape(points, *path.shape[1:])


def path_distances(paths: np.ndarray) -> np.ndarray:
    """(k, k) mean point-to-point distance between every pair of resampled paths."""
    k = len(paths)
    out = np.zeros((k, k))
    for i in range(k):
        out[i] = np.linalg.norm(paths - paths[i], axis=-1).mean(axis=(1, 2))
    return out


def mode_statistics(run: dict[str, Any], paired: bool = False) -> dict[str, Any]:
    """Mean path distance within a mode and between modes (same scene only if paired)."""
    ok = run["success"]
    paths, modes, scene = run["paths"][ok], run["modes"][ok], run["scene"][ok]
    dist = path_distances(paths)
    same = modes[:, None] == modes[None, :]
    valid = ~np.eye(len(modes), dtype=bool)
    if paired:
        valid &= scene[:, None] == scene[None, :]
    within = float(dist[same & valid].mean())
    between = float(dist[~same & valid].mean())
    names = run["mode_names"]
    pairs = {}
    for a in range(len(names)):
        for b in range(a, len(names)):
            mask = (modes[:, None] == a) & (modes[None, :] == b) & valid
            if mask.any():
                pairs[f"{names[a]} | {names[b]}"] = round(float(dist[mask].mean()), 4)
    return {
        "within_mode_m": within,
        "between_modes_m": between,
        "mode_ratio": between / within,
        "pair_mean_distance_m": pairs,
    }


def controller_tracking() -> dict[str, Any]:
    """Commanded vs achieved setpoint motion of the tabletop action space (one env each)."""
    out: dict[str, Any] = {}
    for axis, name in enumerate(("x", "y", "z", "yaw")):
        for magnitude in (1.0, 0.3):
            cfg = compose(["task=arm_pick_place", "task.cameras=[]", "task.init_joint_noise=0"])
            task = make_task(cfg.task, num_envs=1, seed=0)
            assert isinstance(task, TabletopTask)
            task.reset()
            action = np.zeros((1, 5), np.float32)
            action[0, 4] = 1.0
            action[0, axis] = -magnitude if name == "z" else magnitude
            ee, yaw = [task.ee_pos[0].copy()], [float(task.ee_yaw[0])]
            for _ in range(12):
                task.step(action)
                ee.append(task.ee_pos[0].copy())
                yaw.append(float(task.ee_yaw[0]))
            pos, ang = np.array(ee), np.array(yaw)
            step = task.cfg.max_yaw_step if name == "yaw" else task.cfg.max_step
            moved = np.diff(ang)[-6:] if name == "yaw" else np.abs(np.diff(pos[:, axis])[-6:])
            off = [a for a in range(3) if a != axis]
            drift = np.abs(np.diff(pos[:, off], axis=0)).max() if name != "yaw" else None
            hold = np.zeros((1, 5), np.float32)
            hold[0, 4] = 1.0
            before = task.ee_pos[0].copy()
            for _ in range(10):
                task.step(hold)
            out[f"{name}_{magnitude:g}"] = {
                "commanded_per_step": magnitude * step,
                "achieved_per_step": float(moved.mean()),
                "achieved_fraction": float(moved.mean() / (magnitude * step)),
                "max_off_axis_per_step_m": None if drift is None else float(drift),
                "coast_after_stop_m": float(np.linalg.norm(task.ee_pos[0] - before)),
            }
            task.close()
    return out


def run_benchmark(episodes: int, num_envs: int, seed: int, scenes: int) -> dict[str, Any]:
    tasks: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    for name in TASKS:
        run = collect(name, episodes, num_envs, seed)
        ok, modes = run["success"], run["modes"]
        stats = mode_statistics(run)
        paired_run = collect(name, 0, 0, seed + 1, scenes=scenes)
        paired = mode_statistics(paired_run, paired=True)
        paired["runs"] = len(paired_run["success"])
        paired["success"] = float(paired_run["success"].mean())
        tasks[name] = {
            "episodes": len(ok),
            "success": float(ok.mean()),
            "mode_names": run["mode_names"],
            "episodes_per_mode": np.bincount(modes, minlength=len(run["mode_names"])).tolist(),
            "success_per_mode": [
                float(ok[modes == m].mean()) if (modes == m).any() else None
                for m in range(len(run["mode_names"]))
            ],
            "mean_length_steps": float(run["lengths"].mean()),
            "env_steps_per_s": run["env_steps_per_s"],
            "unpaired": stats,
            "paired": paired,
        }
        ratios[f"{name}_success"] = float(ok.mean())
        ratios[f"{name}_mode_ratio"] = stats["mode_ratio"]
        ratios[f"{name}_paired_mode_ratio"] = paired["mode_ratio"]
    return {
        "benchmark": "experts",
        "machine": machine_info(),
        "sizes": {
            "episodes": episodes,
            "num_envs": num_envs,
            "seed": seed,
            "paired_scenes": scenes,
        },
        "path": f"finger-pad centres, {PATH_POINTS} points over each episode's duration",
        "tasks": tasks,
        "controller": controller_tracking(),
        "ratios": ratios,
        "targets": TARGETS,
    }


def print_report(doc: dict[str, Any]) -> None:
    rows = [
        {
            "task": name,
            "success": t["success"],
            "per mode": " ".join(
                f"{s:.2f}" if s is not None else "-" for s in t["success_per_mode"]
            ),
            "within m": t["unpaired"]["within_mode_m"],
            "between m": t["unpaired"]["between_modes_m"],
            "ratio": t["unpaired"]["mode_ratio"],
            "paired within": t["paired"]["within_mode_m"],
            "paired between": t["paired"]["between_modes_m"],
            "paired ratio": t["paired"]["mode_ratio"],
            "steps": t["mean_length_steps"],
        }
        for name, t in doc["tasks"].items()
    ]
    columns = ["task", "success", "per mode", "within m", "between m", "ratio"]
    print_table(rows, [*columns, "paired within", "paired between", "paired ratio", "steps"])
    print("controller (action space):")
    print_table(
        [{"command": k, **v} for k, v in doc["controller"].items()],
        [
            "command",
            "commanded_per_step",
            "achieved_per_step",
            "achieved_fraction",
            "max_off_axis_per_step_m",
            "coast_after_stop_m",
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench experts", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="20 episodes per task")
    parser.add_argument("--episodes", type=int, help="episodes per task (default 200)")
    parser.add_argument("--num-envs", type=int, default=50, help="envs stepped together")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenes", type=int, help="start states of the paired runs (default 12)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    episodes = args.episodes or (20 if args.quick else 200)
    if episodes < 2 or args.num_envs < 1:
        parser.error("--episodes must be at least 2 and --num-envs at least 1")
    scenes = args.scenes or (3 if args.quick else 12)
    doc = run_benchmark(episodes, args.num_envs, args.seed, scenes)
    doc["command"] = "unilab bench experts " + " ".join(argv if argv is not None else sys.argv[1:])
    print_report(doc)
    path = write_json(args.out, doc)
    print(f"wrote {path}")
    failed = [n for n, t in doc["tasks"].items() if t["success"] < TARGETS["success"]]
    if failed and episodes >= 200:
        print(f"below {TARGETS['success']:.0%} success: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
