"""The offline training core of `bc_flow` / `bc_mse`: frames -> gradient steps -> metrics.

    ds = FrameDataset(store, action_horizon=cfg.model.horizon)
    result = train_offline(learner, ds, steps=2000, on_metrics=log)

    trainer = OfflineTrainer(learner, ds, seed=0)   # step by step (what the Runner drives)
    trainer.start(); metrics = trainer.step(); val = trainer.validate(); trainer.close()

Any frame source works that has `len()`, `batch(items) -> dict[str, Tensor]` and either
`episode_of` + `indices` (as `FrameDataset`) or an `episode_index` field in its batches;
this module does not import `unilab.data` (it sits below it in the layers).

The held-out split is by episode (frames of one episode never sit on both sides),
deterministic for a seed. Batches are drawn uniformly from the training items (a learner
with `draw_items` draws them itself, e.g. `awr_flow` by advantage); the batch
of learner step s comes from its own `numpy` stream seeded by (seed, s), so a run resumed
at step s draws exactly the batches the uninterrupted run would have. They are built on a
background thread (`prefetch` batches ahead: reading images overlaps the gradient step) and
moved to the learner device (images stay uint8 until there). `on_metrics(step, metrics)` is called every `log_every`
steps (means over the interval) and after each validation, which runs every
`cfg.val_every` steps and at the end: the Runner's logging, evaluation and checkpoint
hooks attach there. Resuming continues from `learner.step`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch


@runtime_checkable
class OfflineLearner(Protocol):
    """What the offline loop drives: behaviour cloning (`unilab.algos.behavior_cloning`) and
    any other learner of stored frames (the world model, `unilab.worldmodel`). `cfg` has
    `steps`, `batch_size`, `val_fraction`, `val_every` and `val_max_frames`."""

    cfg: Any
    step: int
    device: torch.device

    def seed(self, seed: int) -> None: ...

    def fit_normalizers(self, batch: Mapping[str, torch.Tensor]) -> None: ...

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]: ...

    def validate(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Summed errors of one held-out batch (tensors, pooled over batches by the caller)."""
        ...

    def validation_metrics(self, sums: Mapping[str, float]) -> dict[str, float]:
        """The pooled sums of `validate` -> reported metrics (`val_loss` and others)."""
        ...

    def required_fields(self) -> dict[str, tuple[int, ...]]: ...


class FrameSource(Protocol):
    def __len__(self) -> int: ...

    def batch(self, items: Sequence[int] | np.ndarray) -> dict[str, torch.Tensor]: ...


MetricsHook = Callable[[int, dict[str, float]], None]
ItemDraw = Callable[[np.ndarray, int, int, int], np.ndarray]
"""(training items, batch size, seed, step) -> the batch's items (`batch_items` signature)."""


@dataclass
class OfflineResult:
    steps: int
    """The learner's step count at the end."""
    seconds: float
    samples_per_s: float
    """Frames (with their chunks) per second of the training loop, data loading included."""
    train_items: np.ndarray
    val_items: np.ndarray
    history: list[dict[str, float]] = field(default_factory=list)
    """Every `on_metrics` record, with its `step`."""

    @property
    def last_validation(self) -> dict[str, float]:
        vals = [h for h in self.history if "val_loss" in h]
        return vals[-1] if vals else {}


def spread_items(items: np.ndarray, max_frames: int) -> np.ndarray:
    """All `items`, or `max_frames` of them evenly strided, so every held-out episode
    contributes (a prefix would keep only the first few episodes)."""
    if items.size <= max_frames:
        return items
    return items[np.linspace(0, items.size - 1, max_frames).round().astype(np.int64)]


def item_episodes(frames: Any) -> np.ndarray:
    """Episode index of every item of a frame source."""
    if hasattr(frames, "episode_of") and hasattr(frames, "indices"):
        return np.asarray(frames.episode_of)[np.asarray(frames.indices)]
    out = [
        frames.batch(np.arange(s, min(s + 4096, len(frames))))["episode_index"].numpy()
        for s in range(0, len(frames), 4096)
    ]
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def split_items(
    episodes: np.ndarray, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train items, held-out items), split by episode. With a single episode nothing is
    held out; otherwise at least one episode is when val_fraction > 0."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    ids = np.unique(episodes)
    n_val = 0 if val_fraction == 0 or ids.size < 2 else max(1, round(val_fraction * ids.size))
    held = np.random.default_rng(seed).permutation(ids)[:n_val]
    is_val = np.isin(episodes, held)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


def _to_device(batch: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    pin = device.type == "cuda"
    return {
        k: (v.pin_memory() if pin else v).to(device, non_blocking=True) for k, v in batch.items()
    }


def batch_items(items: np.ndarray, size: int, seed: int, step: int) -> np.ndarray:
    """The (sorted) items of learner step `step`'s batch: a function of (seed, step) only."""
    rng = np.random.default_rng([int(seed), int(step)])
    return np.sort(rng.choice(items, size))


class _Prefetcher:
    """Builds the batches of steps `first_step`, `first_step + 1`, ... on a thread, `depth`
    ahead."""

    def __init__(
        self,
        frames: FrameSource,
        items: np.ndarray,
        size: int,
        seed: int,
        depth: int,
        first_step: int = 0,
        draw: ItemDraw | None = None,
    ):
        self.frames, self.items, self.size, self.seed = frames, items, size, seed
        self.draw: ItemDraw = batch_items if draw is None else draw
        self.next_step = first_step
        self.depth = depth
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        if depth > 0:
            self.thread = threading.Thread(target=self._run, daemon=True, name="bc-prefetch")
            self.thread.start()

    def _make(self) -> dict[str, torch.Tensor]:
        step, self.next_step = self.next_step, self.next_step + 1
        return self.frames.batch(self.draw(self.items, self.size, self.seed, step))

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                item: Any = self._make()
            except BaseException as exc:  # handed to the training thread
                item = exc
            while not self.stop.is_set():
                try:
                    self.queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def next(self) -> dict[str, torch.Tensor]:
        if self.thread is None:
            return self._make()
        while True:
            try:
                item = self.queue.get(timeout=1.0)
            except queue.Empty:
                if not self.thread.is_alive():
                    raise RuntimeError("the batch prefetch thread stopped") from None
                continue
            if isinstance(item, BaseException):
                raise item
            return item

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5.0)


def validate(
    learner: OfflineLearner, frames: FrameSource, items: np.ndarray, batch_size: int
) -> dict[str, float]:
    """Pooled validation metrics of the learner (its EMA weights) over `items`."""
    if items.size == 0:
        return {}
    sums: dict[str, torch.Tensor] = {}
    for start in range(0, items.size, batch_size):
        batch = _to_device(frames.batch(items[start : start + batch_size]), learner.device)
        for k, v in learner.validate(batch).items():
            sums[k] = sums.get(k, torch.zeros((), device=v.device)) + v
    return learner.validation_metrics({k: float(v) for k, v in sums.items()})


def fit_normalizers(
    learner: OfflineLearner, frames: FrameSource, items: np.ndarray, max_frames: int, seed: int
) -> None:
    """Statistics from up to `max_frames` training frames (all of them when fewer)."""
    pick = (
        items
        if items.size <= max_frames
        else np.random.default_rng(seed).choice(items, max_frames, replace=False)
    )
    learner.fit_normalizers(_to_device(frames.batch(np.sort(pick)), learner.device))


class OfflineTrainer:
    """One offline training session, step by step: the held-out split, normalizer
    statistics (on a fresh learner), the batch prefetcher, `step()` and `validate()`.
    The Runner drives it between its hooks; `train_offline` is the plain loop over it."""

    def __init__(
        self,
        learner: OfflineLearner,
        frames: FrameSource,
        *,
        seed: int = 0,
        prefetch: int = 2,
        stats_frames: int = 5000,
    ) -> None:
        cfg = learner.cfg
        self.learner, self.frames, self.seed = learner, frames, int(seed)
        self.prefetch, self.stats_frames = prefetch, stats_frames
        self.train_items, self.val_items = split_items(
            item_episodes(frames), cfg.val_fraction, seed
        )
        if self.train_items.size == 0:
            raise ValueError("no training frames: the frame source is empty")
        self.held_out_items = self.val_items
        """Every held-out frame (validation scores `val_max_frames` of them, spread over
        all held-out episodes; the value heads' calibration reads them all)."""
        self.val_items = spread_items(self.val_items, cfg.val_max_frames)
        self.steps_done = 0
        """Gradient steps taken in this session (a resumed learner counts on from its own)."""
        self._loader: _Prefetcher | None = None

    def start(self) -> None:
        """Fit the normalizers (a fresh learner only) and start building batches."""
        learner, cfg = self.learner, self.learner.cfg
        if learner.step == 0:
            learner.seed(self.seed)
            fit_normalizers(learner, self.frames, self.train_items, self.stats_frames, self.seed)
        # A learner that weighs frames (`awr_flow`) looks at them first and then draws the
        # batches itself: `prepare_frames(frames, train_items, seed)` and `draw_items` with
        # the signature of `batch_items` (a function of (seed, step): resume stays exact).
        prepare = getattr(learner, "prepare_frames", None)
        if callable(prepare):
            prepare(self.frames, self.train_items, self.seed)
        # A calibration fitted after earlier training (`calibrate`) is stale once the
        # weights move: back to the identity, after `prepare_frames` has read values with it.
        reset = getattr(learner, "reset_calibration", None)
        if callable(reset):
            reset()
        draw = getattr(learner, "draw_items", None)
        self._loader = _Prefetcher(
            self.frames,
            self.train_items,
            cfg.batch_size,
            self.seed,
            self.prefetch,
            learner.step,
            draw if callable(draw) else None,
        )

    def step(self) -> dict[str, float]:
        """One gradient step on the next batch; the learner's metrics."""
        if self._loader is None:
            raise RuntimeError("OfflineTrainer.step() before start()")
        batch = _to_device(self._loader.next(), self.learner.device)
        metrics = self.learner.update(batch)
        self.steps_done += 1
        return metrics

    def validate(self) -> dict[str, float]:
        """Held-out metrics of the EMA policy (`val_loss`, `val_action_mse`, `val_frames`);
        {} when nothing is held out."""
        return validate(self.learner, self.frames, self.val_items, self.learner.cfg.batch_size)

    def calibrate(self) -> dict[str, float]:
        """After training: the learner's post-hoc calibration on the held-out frames
        (`calibrate_values`, e.g. Platt scaling of a VLA's P(success)); {} when it has
        none, or nothing is held out."""
        calibrate = getattr(self.learner, "calibrate_values", None)
        if not callable(calibrate) or self.held_out_items.size == 0:
            return {}
        return dict(calibrate(self.frames, self.held_out_items))

    def close(self) -> None:
        if self._loader is not None:
            self._loader.close()
            self._loader = None


def train_offline(
    learner: OfflineLearner,
    frames: FrameSource,
    *,
    steps: int | None = None,
    seed: int = 0,
    log_every: int = 50,
    prefetch: int = 2,
    stats_frames: int = 5000,
    on_metrics: MetricsHook | None = None,
    max_seconds: float | None = None,
) -> OfflineResult:
    """Train `learner` on `frames` until it has taken `steps` steps (default cfg.steps) or
    `max_seconds` passed. Normalizer statistics are fitted on a fresh learner (step 0)."""
    cfg = learner.cfg
    total = cfg.steps if steps is None else int(steps)
    trainer = OfflineTrainer(
        learner, frames, seed=seed, prefetch=prefetch, stats_frames=stats_frames
    )
    history: list[dict[str, float]] = []

    def emit(record: dict[str, float]) -> None:
        record["step"] = float(learner.step)
        history.append(record)
        if on_metrics is not None:
            on_metrics(learner.step, record)

    trainer.start()
    sums: dict[str, float] = {}
    count, t0 = 0, time.perf_counter()
    try:
        while learner.step < total:
            if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                break
            metrics = trainer.step()
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v
            count += 1
            if learner.step % log_every == 0 or learner.step == total:
                rec = {k: v / count for k, v in sums.items()}
                rec["samples_per_s"] = (
                    trainer.steps_done * cfg.batch_size / (time.perf_counter() - t0)
                )
                emit(rec)
                sums, count = {}, 0
            if (
                trainer.val_items.size
                and learner.step % cfg.val_every == 0
                and learner.step < total
            ):
                emit(trainer.validate())
    finally:
        trainer.close()
    seconds = time.perf_counter() - t0
    if trainer.val_items.size:
        emit(trainer.validate())
    try:
        calibration = trainer.calibrate()
    except ValueError:  # e.g. every held-out episode has the same outcome
        calibration = {"calibration_skipped": 1.0}
    if calibration:
        emit({f"val_{k}": v for k, v in calibration.items()})
    return OfflineResult(
        steps=learner.step,
        seconds=seconds,
        samples_per_s=trainer.steps_done * cfg.batch_size / max(seconds, 1e-9),
        train_items=trainer.train_items,
        val_items=trainer.val_items,
        history=history,
    )
