"""`unilab bench render`: camera frames per second per core, per-env against tiled, and
stepping a manipulation task with its cameras on against the tiled render ceiling.

Scene: arm_pick_place (arm, three cubes, two bowls), every env posed by the scripted
expert for a few steps so the arm and cubes are spread out as in collection.

- per_env_default: one `mujoco.Renderer` frame per env with MuJoCo's defaults (shadows,
  reflections, 4x MSAA, 28-slice shapes): what a user gets without thinking;
- per_env: the same with shadows and reflections off;
- per_env_cheap: the same on the observation settings (no MSAA, 12 slices);
- tiled: `unilab.sim.render.BatchRenderer`, every (env, camera) a viewport of one
  framebuffer, one `mjr_readPixels` per batch: the render ceiling;
- tiled_64_fine_floor: the same with the floor MuJoCo scenes usually have (an infinite
  plane drawn with a 5 cm grid), which the tabletop scene no longer has;
- step_cameras: `task.step(expert.act())` with the front and wrist cameras observed
  (physics, the end-effector controller, rewards, observations, auto-resets and images)
  against step_physics, the same with `task.cameras=[]`;
- collect: `unilab.data.collect.collect` end to end (worker processes stepping the task
  with its expert, images through the shared-memory ring, episodes reassembled and
  compressed into a zarr store), camera images per CPU second of all processes over the
  steady part of the run, and the resident memory of every process over it (100k frames
  in the full run: the RSS check).

Ratios: collect_cameras_vs_tiled_64 is collection with cameras against the render ceiling
(target 0.8, which assumed rendering dominates); step_cameras_vs_tiled_64 the same for
plain camera-on stepping in one process; step_cameras_vs_render_plus_physics_64 compares
stepping with one physics step plus its frames at the tiled rate (what is lost beyond the
two parts), collect_vs_step_cameras_64 what the pipeline (expert, ring, store) costs on top.

Rates are frames (or env steps) per CPU second of this process, Mesa's llvmpipe threads
included: "per core". LP_NUM_THREADS defaults to 1 here so that number is not inflated or
deflated by llvmpipe's thread pool; wall rates are reported alongside. Runners take turns
round by round and the best round is kept (the machine is shared).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("LP_NUM_THREADS", "1")

import mujoco
import numpy as np

from unilab.bench.common import (
    Clock,
    interleaved,
    machine_info,
    print_table,
    summarize,
    write_json,
)
from unilab.config import compose
from unilab.data.collect import collect
from unilab.sim.render import BatchRenderer, RenderSettings
from unilab.tasks.experts import make_expert
from unilab.tasks.registry import make_task
from unilab.tasks.tabletop import TabletopTask

DEFAULT_OUT = "bench/results/render.json"
TASK = "arm_pick_place"
CAMERAS = ("front", "wrist")
TARGETS = {"collect_cameras_vs_tiled_64": 0.8}
FRAMES_PER_EPISODE = 72
"""arm_pick_place's mean episode length with its expert (bench/results/experts.json)."""
COLLECT_WORKERS = 2


@dataclass(frozen=True)
class Sizes:
    num_envs: int
    renders: int
    """Batches rendered per timed run."""
    steps: int
    """Task steps per timed run."""
    repeats: int
    collect_frames: int = 100_000
    """Frames `collect` records (the RSS check runs over them)."""
    image_sizes: tuple[int, ...] = (64, 128)


def quick_sizes() -> Sizes:
    return Sizes(num_envs=16, renders=2, steps=6, repeats=2, collect_frames=4000)


def full_sizes() -> Sizes:
    return Sizes(num_envs=64, renders=4, steps=20, repeats=3, collect_frames=100_000)


Rates = tuple[float, float]


def posed_task(
    num_envs: int, size: int, cameras: tuple[str, ...], seed: int = 0
) -> tuple[TabletopTask, Any]:
    overrides = [f"task={TASK}", f"task.image_size={size}", f"task.cameras=[{','.join(cameras)}]"]
    task = make_task(compose(overrides).task, num_envs=num_envs, seed=seed)
    assert isinstance(task, TabletopTask)
    task.reset()
    expert = make_expert(task, seed=seed)
    for _ in range(25):  # arms on their way, some cubes in the air
        result = task.step(expert.act())
        expert.reset(np.flatnonzero(result.terminated | result.truncated))
    return task, expert


def tiled_runner(task: TabletopTask, renders: int) -> Callable[[], Rates]:
    assert task.renderer is not None
    return renderer_runner(task.renderer, task.num_envs, renders)


def fine_floor_renderer(task: TabletopTask, size: int) -> BatchRenderer:
    """A tiled renderer of the same envs whose floor is MuJoCo's usual infinite plane with a
    5 cm grid (the arm scene's floor before this benchmark): drawn as thousands of quads."""
    floor = task.model.geom("floor").id
    saved = task.model.geom_size[floor].copy()
    task.model.geom_size[floor] = [0.0, 0.0, 0.05]
    try:  # the renderer copies the model now; the physics never reads a plane's size
        return BatchRenderer(task.sim, list(CAMERAS), RenderSettings(width=size, height=size))
    finally:
        task.model.geom_size[floor] = saved


def renderer_runner(renderer: BatchRenderer, num_envs: int, renders: int) -> Callable[[], Rates]:
    frames = renders * num_envs * len(renderer.cameras)

    def run() -> Rates:
        with Clock() as clock:
            for _ in range(renders):
                renderer.render()
        return clock.rates(frames)

    return run


def per_env_runner(
    task: TabletopTask, size: int, variant: str, camera: str = "front"
) -> tuple[Callable[[], Rates], Callable[[], None]]:
    """mujoco.Renderer, one frame and one read per env; returns (runner, close)."""
    assert task.renderer is not None
    model = task.model if variant != "cheap" else task.renderer._model
    renderer = mujoco.Renderer(model, size, size)
    shadows = int(variant == "default")
    for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
        renderer.scene.flags[flag] = shadows
    data = mujoco.MjData(model)
    sim = task.sim
    mocap_pos, mocap_quat = sim.bind("mocap_pos"), sim.bind("mocap_quat")
    frame = np.empty((size, size, 3), np.uint8)

    def run() -> Rates:
        with Clock() as clock:
            for env in range(sim.num_envs):
                data.qpos[:] = sim.qpos[env]
                data.mocap_pos[:] = mocap_pos[env]
                data.mocap_quat[:] = mocap_quat[env]
                mujoco.mj_kinematics(model, data)
                mujoco.mj_camlight(model, data)
                renderer.update_scene(data, camera=camera)
                renderer.render(out=frame)
        return clock.rates(sim.num_envs)

    return run, renderer.close


def step_runner(
    task: TabletopTask, expert: Any, steps: int, frames_per_step: int
) -> Callable[[], Rates]:
    count = steps * task.num_envs * max(1, frames_per_step)

    def run() -> Rates:
        with Clock() as clock:
            for _ in range(steps):
                result = task.step(expert.act())
                expert.reset(np.flatnonzero(result.terminated | result.truncated))
        return clock.rates(count)

    return run


def collect_run(frames: int, num_envs: int) -> dict[str, Any]:
    """`collect` of about `frames` frames into a temporary store: its steady throughput
    and resident-memory samples, with the growth after the first tenth of the run."""
    episodes = math.ceil(frames / FRAMES_PER_EPISODE)
    envs = max(1, num_envs // COLLECT_WORKERS)
    with tempfile.TemporaryDirectory() as tmp:
        result = collect(
            os.path.join(tmp, "collect.zarr"),
            TASK,
            episodes,
            workers=COLLECT_WORKERS,
            envs_per_worker=envs,
            quiet=True,
            rss_every_s=1.0,
        )
    return {
        "episodes": result.kept,
        "frames": result.frames,
        "workers": COLLECT_WORKERS,
        "envs_per_worker": envs,
        "success": result.success_rate,
        "seconds": result.seconds,
        "ring": result.ring,
        "steady": result.steady,
        "rss": rss_summary(result.rss),
        "rss_samples": [
            {k: round(v, 1) for k, v in sample.items()}
            for sample in result.rss[:: max(1, len(result.rss) // 60)]
        ],
    }


def rss_summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    """Per process group: the first sample once frames flow, the peak of the first and of
    the last quarter after the first tenth of the run, their difference (growth) and a
    least-squares slope in MiB per 100k env steps."""
    flowing = [s for s in samples if s["env_steps"] > 0]
    if len(flowing) < 8:
        return {"samples": len(flowing)}
    total = flowing[-1]["env_steps"]
    warm = [s for s in flowing if s["env_steps"] >= 0.1 * total]
    quarter = max(1, len(warm) // 4)
    out: dict[str, Any] = {"samples": len(flowing), "env_steps": total}
    for key in ("main_mib", "workers_mib"):
        steps = np.array([s["env_steps"] for s in warm], dtype=np.float64)
        values = np.array([s[key] for s in warm], dtype=np.float64)
        slope = float(np.polyfit(steps, values, 1)[0]) * 1e5 if np.ptp(steps) > 0 else 0.0
        early, late = values[:quarter].max(), values[-quarter:].max()
        out[key] = {
            "start": flowing[0][key],
            "early_peak": float(early),
            "late_peak": float(late),
            "growth": float(late - early),
            "slope_per_100k_steps": slope,
        }
    return out


def collect_notes(collection: dict[str, Any]) -> list[str]:
    """One line on the collect run and one on its memory, for the report."""
    rss = collection["rss"]
    lines = [
        f"collect: {collection['frames']:,} frames, {collection['episodes']:,} episodes in "
        f"{collection['seconds']:.0f} s ({collection['workers']} workers x "
        f"{collection['envs_per_worker']} envs), success {collection['success']}"
    ]
    if "main_mib" in rss:
        parts = [
            f"{key.removesuffix('_mib')} {rss[key]['early_peak']:,.0f} -> "
            f"{rss[key]['late_peak']:,.0f} MiB (growth {rss[key]['growth']:+.1f} MiB)"
            for key in ("main_mib", "workers_mib")
        ]
        lines.append(
            f"resident memory over {rss['env_steps']:,} env steps, peak of the first vs the "
            f"last quarter after the first tenth: {'; '.join(parts)}"
        )
    return lines


def run_benchmark(sizes: Sizes) -> dict[str, Any]:
    results: dict[str, Any] = {}
    closers: list[Callable[[], None]] = []
    runners: dict[str, Callable[[], Rates]] = {}
    tasks = []
    for size in sizes.image_sizes:
        task, _ = posed_task(sizes.num_envs, size, CAMERAS)
        tasks.append(task)
        runners[f"tiled_{size}"] = tiled_runner(task, sizes.renders)
        if size == 64:
            fine = fine_floor_renderer(task, size)
            closers.append(fine.close)
            runners["tiled_64_fine_floor"] = renderer_runner(fine, task.num_envs, sizes.renders)
        for variant in ("default", "plain", "cheap"):
            name = f"per_env_{variant}_{size}" if variant != "plain" else f"per_env_{size}"
            run, close = per_env_runner(task, size, variant)
            runners[name] = run
            closers.append(close)
    cam_task, cam_expert = posed_task(sizes.num_envs, 64, CAMERAS, seed=1)
    phys_task, phys_expert = posed_task(sizes.num_envs, 64, (), seed=1)
    tasks += [cam_task, phys_task]
    runners["step_cameras_64"] = step_runner(cam_task, cam_expert, sizes.steps, len(CAMERAS))
    runners["step_physics"] = step_runner(phys_task, phys_expert, sizes.steps, 1)
    try:
        runs = interleaved(runners, sizes.repeats)
    finally:
        for close in closers:
            close()
        for task in tasks:
            task.close()
    for name, values in runs.items():
        results[name] = {
            "wall": summarize([w for w, _ in values]),
            "cpu": summarize([c for _, c in values]),
        }
    collection = collect_run(sizes.collect_frames, sizes.num_envs)
    steady = collection["steady"]
    results["collect_cameras_64"] = {
        "wall": summarize([steady["images_per_wall_s"]]),
        "cpu": summarize([steady["images_per_cpu_s"]]),
    }
    best = {name: r["cpu"]["best"] for name, r in results.items()}
    # What stepping with cameras would reach if it cost exactly one physics step plus its
    # frames at the tiled rate, nothing else: the measured rate over it shows the overhead.
    ncam = len(CAMERAS)
    parts = 1.0 / (1.0 / best["tiled_64"] + 1.0 / (ncam * best["step_physics"]))
    ratios = {
        "collect_cameras_vs_tiled_64": best["collect_cameras_64"] / best["tiled_64"],
        "collect_vs_step_cameras_64": best["collect_cameras_64"] / best["step_cameras_64"],
        "step_cameras_vs_tiled_64": best["step_cameras_64"] / best["tiled_64"],
        "step_cameras_vs_render_plus_physics_64": best["step_cameras_64"] / parts,
        "render_plus_physics_vs_tiled_64": parts / best["tiled_64"],
    }
    for size in sizes.image_sizes:
        ratios[f"tiled_vs_per_env_{size}"] = best[f"tiled_{size}"] / best[f"per_env_{size}"]
        ratios[f"tiled_vs_per_env_default_{size}"] = (
            best[f"tiled_{size}"] / best[f"per_env_default_{size}"]
        )
    if "tiled_64_fine_floor" in best:
        ratios["coarse_vs_fine_floor_64"] = best["tiled_64"] / best["tiled_64_fine_floor"]
    # Where the time of a camera step goes: physics + control per env step, render per frame.
    split = {
        "physics_ms_per_env_step": 1e3 / best["step_physics"],
        "render_ms_per_frame_64": 1e3 / best["tiled_64"],
        "render_ms_per_frame_128": 1e3 / best["tiled_128"] if "tiled_128" in best else None,
    }
    return {
        "benchmark": "render",
        "machine": machine_info(),
        "gl": _gl_info(),
        "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
        "task": TASK,
        "cameras": list(CAMERAS),
        "sizes": asdict(sizes),
        "unit": "frames (step_physics: env steps) per CPU second of this process, llvmpipe "
        "threads included; wall alongside; best of the repeats",
        "rates": results,
        "rows": [
            {
                "runner": name,
                "frames per cpu s": r["cpu"]["best"],
                "frames per wall s": r["wall"]["best"],
                "ms per frame (cpu)": 1e3 / r["cpu"]["best"],
            }
            for name, r in results.items()
        ],
        "split": split,
        "collect": collection,
        "notes": collect_notes(collection),
        "ratios": ratios,
        "targets": TARGETS,
    }


def _gl_info() -> dict[str, str]:
    try:
        from OpenGL import GL

        ctx = mujoco.GLContext(16, 16)
        ctx.make_current()
        info = {
            "renderer": GL.glGetString(GL.GL_RENDERER).decode(),
            "version": GL.glGetString(GL.GL_VERSION).decode(),
        }
        ctx.free()
        return info
    except Exception as exc:  # the numbers stand without it
        return {"error": str(exc)}


def print_report(doc: dict[str, Any]) -> None:
    rows = [
        {
            "runner": name,
            "per cpu s": r["cpu"]["best"],
            "per wall s": r["wall"]["best"],
            "ms / item (cpu)": 1e3 / r["cpu"]["best"],
        }
        for name, r in doc["rates"].items()
    ]
    print(
        f"GL: {doc['gl']}  LP_NUM_THREADS={doc['lp_num_threads']}  envs={doc['sizes']['num_envs']}"
    )
    print_table(rows, ["runner", "per cpu s", "per wall s", "ms / item (cpu)"])
    print("split:", {k: round(v, 3) if v else v for k, v in doc["split"].items()})
    collection = doc["collect"]
    print(
        f"collect: {collection['frames']} frames, {collection['episodes']} episodes in "
        f"{collection['seconds']:.0f} s ({collection['workers']} workers x "
        f"{collection['envs_per_worker']} envs); rss: {collection['rss']}"
    )
    print("ratios:", {k: round(v, 3) for k, v in doc["ratios"].items()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unilab bench render", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument("--num-envs", type=int, help="envs per batch")
    parser.add_argument("--repeats", type=int, help="rounds of runs")
    parser.add_argument("--collect-frames", type=int, help="frames of the collect run")
    args = parser.parse_args(argv)
    base = quick_sizes() if args.quick else full_sizes()
    sizes = Sizes(
        num_envs=args.num_envs or base.num_envs,
        renders=base.renders,
        steps=base.steps,
        repeats=args.repeats or base.repeats,
        collect_frames=args.collect_frames or base.collect_frames,
    )
    if sizes.num_envs < 1 or sizes.repeats < 1 or sizes.collect_frames < 1:
        parser.error("--num-envs, --repeats and --collect-frames must be at least 1")
    doc = run_benchmark(sizes)
    doc["quick"] = bool(args.quick)
    doc["command"] = "unilab bench render " + " ".join(argv if argv is not None else sys.argv[1:])
    print_report(doc)
    path = write_json(args.out, doc)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
