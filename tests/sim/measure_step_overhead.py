"""Measure BatchedSim.step against raw mujoco.batch.Batch.step (not a test; run by hand).

    .venv/bin/python tests/sim/measure_step_overhead.py [--steps 100] [--reps 3]

Gymnasium's ant.xml (8 hinges, free base, contacts), substeps 5, every run from the same
start state with the same controls, so all variants compute identical trajectories. Runs are
interleaved and the fastest of --reps kept; overhead is compared in CPU time (process_time),
which other load on a shared machine disturbs far less than wall time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium
import mujoco
import numpy as np
from mujoco import batch as mjbatch

from unilab.sim import BatchedSim

SUBSTEPS = 5
VEL = int(mujoco.mjtStage.mjSTAGE_VEL)
OUTPUTS = ("qacc", "sensordata", "xpos", "xquat", "site_xpos", "site_xmat", "cvel", "ncon")


def ant_model() -> mujoco.MjModel:
    path = Path(gymnasium.__file__).parent / "envs/mujoco/assets/ant.xml"
    return mujoco.MjModel.from_xml_path(str(path))


def raw_runner(
    model: mujoco.MjModel, n: int, nthread: int, like_sim: bool
) -> Callable[[np.ndarray], None]:
    """like_sim: persistent, same bound outputs and stage as BatchedSim; else the leanest batch."""
    b = mjbatch.Batch(model, n, nthread, persistent=like_sim)
    ctrl = b.bind("ctrl")
    if like_sim:
        for name in OUTPUTS:
            b.bind(name)
    stage = VEL if like_sim else int(mujoco.mjtStage.mjSTAGE_NONE)

    def run(controls: np.ndarray) -> None:
        b.reset(None, -1)
        for u in controls:
            ctrl[...] = u
            b.step(nstep=SUBSTEPS, stage=stage)

    return run


def sim_runner(model: mujoco.MjModel, n: int, nthread: int) -> Callable[[np.ndarray], None]:
    sim = BatchedSim(model, n, nthread=nthread, substeps=SUBSTEPS)
    every = np.arange(n)

    def run(controls: np.ndarray) -> None:
        sim.reset(every)
        for u in controls:
            sim.step(u)

    return run


class _NoPhysics:
    """Stands in for a Batch whose step() does nothing: what remains of BatchedSim.step is
    its own overhead (ctrl copy, stability checks, status)."""

    def __init__(self, batch: mjbatch.Batch) -> None:
        self._batch = batch

    def step(self, *args: object, **kwargs: object) -> None:
        pass

    def __getattr__(self, name: str) -> object:
        return getattr(self._batch, name)


def overhead_us(model: mujoco.MjModel, n: int, calls: int = 2000) -> float:
    sim = BatchedSim(model, n, substeps=SUBSTEPS)
    sim.batch = _NoPhysics(sim.batch)  # type: ignore[assignment]
    u = np.zeros((n, model.nu))
    t0 = time.perf_counter()
    for _ in range(calls):
        sim.step(u)
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    model = ant_model()
    print(
        f"ant.xml: nq={model.nq} nv={model.nv} nu={model.nu}, substeps={SUBSTEPS}, steps={args.steps}"
    )
    for n in (64, 256):
        print(f"BatchedSim.step without physics, {n} envs: {overhead_us(model, n):.1f} us per call")
    print(
        f"{'envs':>5} {'thr':>3} | env steps/s (wall): {'raw lean':>9} {'raw like':>9}"
        f" {'BatchedSim':>10} | CPU overhead of BatchedSim vs like / lean"
    )
    for nthread in (1, 2):
        for n in (64, 256):
            controls = np.random.default_rng(0).uniform(-1, 1, (args.steps, n, model.nu))
            runners = {
                "lean": raw_runner(model, n, nthread, like_sim=False),
                "like": raw_runner(model, n, nthread, like_sim=True),
                "sim": sim_runner(model, n, nthread),
            }
            wall = dict.fromkeys(runners, np.inf)
            cpu = dict.fromkeys(runners, np.inf)
            for _ in range(args.reps):
                for name, run in runners.items():
                    w0, c0 = time.perf_counter(), time.process_time()
                    run(controls)
                    wall[name] = min(wall[name], time.perf_counter() - w0)
                    cpu[name] = min(cpu[name], time.process_time() - c0)
            rate = {k: args.steps * n / v for k, v in wall.items()}
            print(
                f"{n:>5} {nthread:>3} | {'':>19} {rate['lean']:>9.0f} {rate['like']:>9.0f}"
                f" {rate['sim']:>10.0f} | {100 * (cpu['sim'] / cpu['like'] - 1):+.1f}%"
                f" / {100 * (cpu['sim'] / cpu['lean'] - 1):+.1f}%"
            )


if __name__ == "__main__":
    main()
