"""What the round-2 hardening costs: weight-store checksums and fsynced episode appends.

1. Weight store: `publish` and `read_if_newer` in µs, checksum off (x86-64 default) and on
   (arm64 default), for actor sizes from a small MLP to a large one (the PPO default actor
   256-128-64 on a humanoid-sized observation is the "realistic" row).
2. Episode store: one append (a HIL-sized episode: 200 frames of 48+60 observations, 12
   actions and one 64×64 camera) with the data fsynced (the default for origin real/human)
   and without (sim), in ms, measured interleaved in the same run.

    python -m unilab.bench.hardening_costs [--dir DIR] [--out bench/results/hardening_costs.json]

`--dir` sets where the episode stores go: fsync costs depend on the disk under it.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from unilab.bench.common import machine_info, print_table, write_json
from unilab.data import EpisodeStore, StoreSchema
from unilab.runtime.shm import SegmentOwner
from unilab.runtime.weights import WeightStore


def mlp_floats(sizes: list[int]) -> int:
    return sum(a * b + b for a, b in itertools.pairwise(sizes)) + sizes[-1]


ACTORS = {
    "small 48-64-64-12": mlp_floats([48, 64, 64, 12]),
    "PPO default 348-256-128-64-17": mlp_floats([348, 256, 128, 64, 17]),
    "large 512-1024-1024-512-32": mlp_floats([512, 1024, 1024, 512, 32]),
}


def weight_store_costs(repeats: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    owner = SegmentOwner()
    try:
        for label, floats in ACTORS.items():
            stores = {
                c: WeightStore.create(owner, floats, checksum=c, name=f"w{len(rows)}{int(c)}")
                for c in (False, True)
            }
            readers = {c: WeightStore.attach(s.handle()) for c, s in stores.items()}
            params = np.random.default_rng(0).standard_normal(floats).astype(np.float32)
            out = np.empty(floats, np.float32)
            times: dict[tuple[bool, str], list[float]] = {}
            for _ in range(repeats):  # interleaved: load bursts hit both paths alike
                for c in (False, True):
                    t0 = time.perf_counter()
                    version = stores[c].publish(params)
                    t1 = time.perf_counter()
                    got = readers[c].read_if_newer(version - 1, out)
                    t2 = time.perf_counter()
                    assert got is not None and got[0] == version
                    times.setdefault((c, "publish"), []).append(t1 - t0)
                    times.setdefault((c, "read"), []).append(t2 - t1)
            row: dict[str, Any] = {"actor": label, "floats": floats, "KiB": floats * 4 / 1024}
            for c in (False, True):
                tag = "checksum" if c else "plain"
                for op in ("publish", "read"):
                    row[f"{op}_{tag}_us"] = 1e6 * statistics.median(times[(c, op)])
            rows.append(row)
    finally:
        owner.unlink_all()
    return rows


def _episode(n: int, origin: str) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    return {
        "obs/policy": rng.standard_normal((n, 48)).astype(np.float32),
        "obs/critic": rng.standard_normal((n, 60)).astype(np.float32),
        "images/front": rng.integers(0, 255, (n, 64, 64, 3), dtype=np.uint8),
        "action": rng.standard_normal((n, 12)).astype(np.float32),
        "reward": rng.standard_normal(n).astype(np.float32),
        "terminated": np.zeros(n, bool),
        "truncated": np.arange(n) == n - 1,
        "origin": origin,
    }


def fsync_costs(root: Path, repeats: int, frames: int) -> dict[str, Any]:
    schema = StoreSchema.build(
        obs={"policy": 48, "critic": 60}, action=12, images={"front": (64, 64)}
    )
    times: dict[str, list[float]] = {"sim (no data fsync)": [], "human (data fsynced)": []}
    with tempfile.TemporaryDirectory(dir=root, prefix="unilab-fsync-bench-") as tmp:
        stores = {
            label: EpisodeStore.create(Path(tmp) / f"{i}.zarr", schema)
            for i, label in enumerate(times)
        }
        episodes = {
            "sim (no data fsync)": _episode(frames, "sim"),
            "human (data fsynced)": _episode(frames, "human"),
        }
        try:
            for _ in range(repeats):
                for label, store in stores.items():
                    t0 = time.perf_counter()
                    store.append_episode(episodes[label], {"fps": 30.0})
                    times[label].append(time.perf_counter() - t0)
        finally:
            for store in stores.values():
                store.close()
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    return {
        "frames_per_episode": frames,
        "append_ms_median": med,
        "append_ms_runs": {k: [round(1e3 * x, 2) for x in v] for k, v in times.items()},
        "fsync_extra_ms": med["human (data fsynced)"] - med["sim (no data fsync)"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=".", help="directory for the episode stores")
    parser.add_argument("--repeats", type=int, default=200, help="weight-store repetitions")
    parser.add_argument("--appends", type=int, default=15, help="appends per store")
    parser.add_argument("--frames", type=int, default=200, help="frames per episode")
    parser.add_argument("--out", default="bench/results/hardening_costs.json")
    args = parser.parse_args(argv)
    info = machine_info(("numpy", "zarr"))
    weights = weight_store_costs(args.repeats)
    print_table(
        weights,
        [
            "actor",
            "floats",
            "KiB",
            "publish_plain_us",
            "publish_checksum_us",
            "read_plain_us",
            "read_checksum_us",
        ],
    )
    fsync = fsync_costs(Path(args.dir), args.appends, args.frames)
    print()
    for label, ms in fsync["append_ms_median"].items():
        print(f"append {fsync['frames_per_episode']} frames, {label}: {ms:.1f} ms (median)")
    print(f"fsync of the data adds {fsync['fsync_extra_ms']:.1f} ms per append")
    out = write_json(args.out, {"machine": info, "weight_store": weights, "episode_fsync": fsync})
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
