"""Throughput of the episode store: append, batched recording, sequential and random reads.

    python -m bench.store [--dir DIR] [--json OUT]

Prints a table; the numbers in docs/decisions/0005-episode-store.md come from here.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from unilab.data.schema import StoreSchema
from unilab.data.store import EpisodeStore
from unilab.data.writer import EpisodeWriter

OBS = {"policy": 48, "critic": 60}
ACTION = 12
CAMERA = (64, 64)


def _image(n: int, rng: np.random.Generator) -> np.ndarray:
    """Render-like frames: smooth gradients with a little noise (compress like sim renders)."""
    y, x = np.mgrid[0 : CAMERA[0], 0 : CAMERA[1]]
    base = np.stack([x * 3, y * 3, (x + y) * 2], axis=-1).astype(np.int16)
    shift = (np.arange(n) % 64)[:, None, None, None]
    noise = rng.integers(0, 8, size=(n, *CAMERA, 3), dtype=np.int16)
    return ((base[None] + shift + noise) % 256).astype(np.uint8)


def _episode(n: int, rng: np.random.Generator, images: bool) -> dict[str, Any]:
    frames: dict[str, Any] = {
        f"obs/{g}": rng.standard_normal((n, d)).astype(np.float32) for g, d in OBS.items()
    }
    frames["action"] = rng.uniform(-1, 1, (n, ACTION)).astype(np.float32)
    frames["reward"] = rng.standard_normal(n).astype(np.float32)
    frames["terminated"] = np.zeros(n, bool)
    frames["truncated"] = np.r_[np.zeros(n - 1, bool), True]
    frames["origin"] = "sim"
    if images:
        frames["images/front"] = _image(n, rng)
    return frames


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_append(root: Path, images: bool, episodes: int, length: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    schema = StoreSchema.build(obs=OBS, action=ACTION, images={"front": CAMERA} if images else None)
    data = [_episode(length, rng, images) for _ in range(episodes)]
    path = root / f"append_{int(images)}.zarr"
    with EpisodeStore.create(path, schema) as store:
        seconds = _timed(lambda: [store.append_episode(ep, {"fps": 50.0}) for ep in data])
    frames = episodes * length
    return {
        "frames_per_s": frames / seconds,
        "ms_per_episode": 1000 * seconds / episodes,
        "disk_mib": sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20,
    }


def bench_reads(path: Path, images: bool) -> dict[str, float]:
    from unilab.data.dataset import FrameDataset

    out: dict[str, float] = {}
    with EpisodeStore.open(path, "r") as store:
        n = len(store)
        seconds = _timed(lambda: [store.episode(i) for i in range(n)])
        out["episode_read_frames_per_s"] = store.num_frames / seconds
    fields = ["obs/policy", "action", *(["images/front"] if images else [])]
    t0 = time.perf_counter()
    ds = FrameDataset(path, fields=fields, action_horizon=16)
    out["dataset_open_s"] = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    batches = 20 if images else 200
    seconds = _timed(lambda: [ds.batch(rng.integers(0, len(ds), 256)) for _ in range(batches)])
    out["random_batch256_frames_per_s"] = batches * 256 / seconds
    ds.close()
    return out


def bench_writer(
    root: Path, n_envs: int, steps: int, horizon: int, commit_frames: int
) -> dict[str, float]:
    """Recording overhead of EpisodeWriter on a batched task (vector observations)."""
    rng = np.random.default_rng(1)
    schema = StoreSchema.build(obs=OBS, action=ACTION)
    store = EpisodeStore.create(root / f"writer_{commit_frames}.zarr", schema)
    writer = EpisodeWriter(store, n_envs, default_meta={"fps": 50.0}, commit_frames=commit_frames)
    # Staggered episode ends, as in a running batched task.
    age = rng.integers(0, horizon, n_envs)
    obs = {f"obs/{g}": rng.standard_normal((n_envs, d)).astype(np.float32) for g, d in OBS.items()}
    act = rng.uniform(-1, 1, (n_envs, ACTION)).astype(np.float32)
    rew = rng.standard_normal(n_envs).astype(np.float32)
    no = np.zeros(n_envs, bool)
    per_step: list[float] = []
    appends: list[float] = []
    for _ in range(steps):
        ends = age == horizon - 1
        done_before = writer.episodes_written
        t = time.perf_counter()
        writer.add_step({**obs, "action": act, "reward": rew, "terminated": no, "truncated": ends})
        dt = time.perf_counter() - t
        (appends if writer.episodes_written > done_before else per_step).append(dt)
        age = np.where(ends, 0, age + 1)
    total = sum(per_step) + sum(appends)
    writer.close()
    store.close()
    return {
        "n_envs": n_envs,
        "commit_frames": commit_frames,
        "ms_per_step_no_commit": 1000 * float(np.median(per_step)) if per_step else 0.0,
        "ms_per_step_with_commit": 1000 * float(np.median(appends)) if appends else 0.0,
        "commits": len(appends),
        "us_per_env_step_overall": 1e6 * total / (steps * n_envs),
        "episodes": writer.episodes_written,
    }


def run(root: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    results["append_vectors"] = bench_append(root, False, 40, 500)
    results["append_images_64x64"] = bench_append(root, True, 20, 200)
    results["read_vectors"] = bench_reads(root / "append_0.zarr", False)
    results["read_images_64x64"] = bench_reads(root / "append_1.zarr", True)
    results["writer_1024_envs_commit_each_step"] = bench_writer(root, 1024, 300, 200, 0)
    results["writer_1024_envs_commit_16k_frames"] = bench_writer(root, 1024, 300, 200, 16384)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="unilab-store-bench-", dir=args.dir))
    try:
        results = run(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for name, values in results.items():
        print(name)
        for key, value in values.items():
            print(f"  {key:<32} {value:>14,.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
