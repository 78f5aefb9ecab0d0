"""Camera-image chunking of the episode store: frames per chunk against append cost,
sequential (whole-episode) reads and random batch reads, on real collected frames.

    python -m bench.image_chunks SOURCE_STORE [--chunks 21,64,128,256] [--json OUT]

SOURCE_STORE is a store `unilab collect` wrote (its episodes are copied into one fresh
store per chunk size). The numbers in docs/decisions/0034-image-store-chunks.md come from
here.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from unilab.data.schema import FieldSpec, StoreSchema
from unilab.data.store import EpisodeStore


def _schema(source: StoreSchema, frames_per_chunk: int) -> StoreSchema:
    fields = {}
    for name in source.user_fields:
        spec = source.fields[name]
        chunk = frames_per_chunk if spec.is_image else None
        fields[name] = FieldSpec(spec.shape, spec.dtype, chunk)
    return StoreSchema(fields)


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(
    source: Path, frames_per_chunk: int, work: Path, rng: np.random.Generator
) -> dict[str, Any]:
    target = work / f"chunks_{frames_per_chunk}.zarr"
    with EpisodeStore.open(source, "r") as src:
        episodes = [(src.episode(i), src.meta(i)) for i in range(len(src))]
        schema = _schema(src.schema, frames_per_chunk)
    frames = sum(len(f["reward"]) for f, _ in episodes)
    cameras = [n for n in schema.user_fields if schema.fields[n].is_image]
    t0 = time.perf_counter()
    with EpisodeStore.create(target, schema) as st:
        for k in range(0, len(episodes), 16):  # commits of 16 episodes, as collect groups them
            st.append_episodes(episodes[k : k + 16])
    append_s = time.perf_counter() - t0
    with EpisodeStore.open(target, "r") as st:
        t0 = time.perf_counter()
        for i in range(len(st)):
            st.episode(i, fields=cameras)
        sequential_s = time.perf_counter() - t0
        batches, batch = 20, 64
        t0 = time.perf_counter()
        for _ in range(batches):
            rows = rng.integers(0, st.num_frames, batch)
            for cam in cameras:
                st.read_rows(cam, rows)
        random_s = time.perf_counter() - t0
    return {
        "frames_per_chunk": frames_per_chunk,
        "chunk_kib": frames_per_chunk * schema.fields[cameras[0]].frame_bytes / 1024,
        "append_us_per_frame": 1e6 * append_s / frames,
        "sequential_us_per_frame": 1e6 * sequential_s / frames,
        "random_ms_per_batch_of_64": 1e3 * random_s / batches,
        "disk_bytes_per_frame": _disk_bytes(target) / frames,
        "frames": frames,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.image_chunks", description=__doc__)
    parser.add_argument("source", help="a store written by unilab collect")
    parser.add_argument("--chunks", default="21,64,128,256", help="frames per image chunk")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(c) for c in args.chunks.split(",")):
            rows.append(measure(Path(args.source), n, Path(tmp), rng))
            shutil.rmtree(Path(tmp) / f"chunks_{n}.zarr")
            print(
                json.dumps(
                    {k: round(v, 2) if isinstance(v, float) else v for k, v in rows[-1].items()}
                )
            )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"benchmark": "image_chunks", "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
