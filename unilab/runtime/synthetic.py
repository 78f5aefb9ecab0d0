"""A synthetic worker that fills chunks with deterministic, checkable values.

Used by the runtime tests and benchmarks, and by anyone who wants to drive a learner loop
without MuJoCo. Every element is a known function of (worker, generation, seq, t, env), so
`check_chunk` finds torn, stale, duplicated or half-written chunks.

Config keys (all optional): ``step_sleep_s`` (sleep after each step, so kills land
mid-chunk), ``max_chunks``, ``fail_worker`` / ``fail_generation`` / ``fail_at_seq`` (raise
RuntimeError there), ``hang_worker`` / ``hang_at_seq`` (that worker, in every generation,
stops heartbeating before it publishes chunk ``hang_at_seq``: a hang),
``skip_last_step`` (publish without writing the last step: a bug the checker must catch),
``nan_at_seq`` (write NaN into the first key of that chunk: a corrupted chunk).
"""

from __future__ import annotations

import time

import numpy as np

from unilab.runtime.chunk_spec import ChunkSpec
from unilab.runtime.poison import has_poison
from unilab.runtime.ring_layout import SlotHeader
from unilab.runtime.worker_base import WorkerContext

KEY_CHANNELS = 5  # worker, generation, seq, t, env: each exact in float32 below 2**24
IMAGE_SHAPE = (6, 4)


def synthetic_spec() -> ChunkSpec:
    return ChunkSpec(
        {
            "key": ((KEY_CHANNELS,), np.float32),
            "image": (IMAGE_SHAPE, np.uint8),
            "step": ((), np.int64),
        }
    )


def expected_step(
    worker_id: int, generation: int, seq: int, t: int, n_envs: int, chunk_len: int
) -> dict[str, np.ndarray]:
    """The values of step `t` of chunk `seq`: field -> (n_envs, *shape)."""
    env = np.arange(n_envs)
    key = np.empty((n_envs, KEY_CHANNELS), np.float32)
    key[:, 0], key[:, 1], key[:, 2], key[:, 3], key[:, 4] = worker_id, generation, seq, t, env
    pixel = np.arange(int(np.prod(IMAGE_SHAPE))).reshape(IMAGE_SHAPE)
    # Values stay below 251, so never the uint8 poison 255.
    image = (seq * 7 + t * 5 + worker_id * 11 + env[:, None, None] * 3 + pixel) % 251
    step = np.full(n_envs, seq * chunk_len + t, np.int64)
    return {"key": key, "image": image.astype(np.uint8), "step": step}


def check_chunk(header: SlotHeader, views: dict[str, np.ndarray]) -> list[str]:
    """Problems found in a published chunk (empty list: every element is as expected)."""
    problems = []
    for name, array in views.items():
        if has_poison(array):
            problems.append(f"{name}: poison visible (never written)")
    chunk_len, n_envs = views["step"].shape
    for t in range(chunk_len):
        want = expected_step(header.worker_id, header.generation, header.seq, t, n_envs, chunk_len)
        for name, value in want.items():
            if not np.array_equal(views[name][t], value):
                problems.append(f"{name}[t={t}] differs from worker/generation/seq in header")
                break
    if header.step_count != (header.seq + 1) * chunk_len * n_envs:
        problems.append(f"step_count {header.step_count} does not match seq {header.seq}")
    return problems


def synthetic_worker_main(ctx: WorkerContext) -> None:
    if ctx.ring is None:
        raise RuntimeError("the synthetic worker needs a ring buffer")
    cfg = ctx.config
    step_sleep_s = float(cfg.get("step_sleep_s", 0.0))
    max_chunks = cfg.get("max_chunks")
    fail_here = (
        cfg.get("fail_worker") == ctx.worker_id and cfg.get("fail_generation", 0) == ctx.generation
    )
    fail_at_seq = cfg.get("fail_at_seq")
    skip_last = bool(cfg.get("skip_last_step", False))
    hang_at = cfg.get("hang_at_seq") if cfg.get("hang_worker") == ctx.worker_id else None
    nan_at = cfg.get("nan_at_seq")
    n_envs, chunk_len = ctx.ring.n_envs, ctx.ring.chunk_len
    version, params = 0, None
    seq = 0
    while not ctx.should_stop() and (max_chunks is None or seq < max_chunks):
        if ctx.weights is not None:
            got = ctx.weights.read_if_newer(version, params)
            if got is not None:
                version, params = got
        slot = ctx.acquire_slot()
        views = ctx.ring.views(slot)
        for t in range(chunk_len - 1 if skip_last else chunk_len):
            for name, value in expected_step(
                ctx.worker_id, ctx.generation, seq, t, n_envs, chunk_len
            ).items():
                views[name][t] = value
            ctx.stepped()
            if step_sleep_s:
                time.sleep(step_sleep_s)
        if fail_here and seq == fail_at_seq:
            raise RuntimeError(f"synthetic failure in worker {ctx.worker_id} at seq {seq}")
        if hang_at is not None and seq == hang_at:
            time.sleep(3600)  # no heartbeat: the supervisor must find this hang
        if nan_at is not None and seq == nan_at:
            views["key"][0, 0, 0] = np.nan
        ctx.ring.publish(slot, seq, version, (seq + 1) * chunk_len * n_envs)
        seq += 1
