"""The offline loop of a `Runner`: an episode store's frames → gradient steps → hooks.

For algorithms that learn from demonstrations (`Algorithm.offline`: bc_flow, bc_mse). One
iteration is one gradient step of `unilab.algos.offline.OfflineTrainer` (batches of
`FrameDataset` action chunks built on a background thread, augmentation, EMA); around it
the Runner's shared machinery: `on_iteration` hooks after every step (mid-run evaluation
in the simulator with chunked execution, benchmarks), a metrics row every
`logging.log_every` steps (x axis `step`), held-out validation every `algo.val_every`
steps and at the end, a checkpoint every `run.checkpoint_every` steps and at the end,
`run.max_wall_s`, SIGINT/SIGTERM and `runner.request_stop()`.

Resume is bit-exact: a checkpoint holds the learner (weights, EMA, optimizer, step, its
random generator) and the batch of step s depends only on (run.seed, s), so N steps,
a resume and N more give the weights of 2N uninterrupted steps.

Frames come in through `Runner(cfg, frames=...)` (`unilab.workflows.train` opens
`data.store`; the data tools sit above this layer). Before anything is written, the
frames are checked against what the policy reads: a missing field or a wrong shape is a
ConfigError naming what is missing and what the store has.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from unilab.algos.offline import FrameSource, OfflineLearner, OfflineTrainer
from unilab.config.errors import ConfigError
from unilab.runtime.signals import StopSignal
from unilab.train.hooks import IterationInfo, RunResult
from unilab.train.loops import TrainLoop
from unilab.utils.progress import TrainingProgress

if TYPE_CHECKING:
    from unilab.train.runner import Runner


class OfflineLoop(TrainLoop):
    progress_unit = "samples/s"
    progress_metric = "loss"
    step_key = "step"

    def __init__(self, runner: Runner, frames: FrameSource | None) -> None:
        super().__init__(runner)
        self.frames = frames
        self.progress_total = int(runner.cfg.algo.steps)
        self.trainer: OfflineTrainer | None = None
        self.validation: dict[str, float] = {}
        """The newest held-out metrics."""
        self.calibration: dict[str, float] = {}
        """The value heads' post-hoc calibration (`_calibrate`), when there was one."""
        self.train_means: dict[str, float] = {}
        """The newest logged means of the training metrics."""
        self.start_step = 0
        self.seconds = 0.0

    def learner_threads(self, cpu_count: int) -> int:
        return cpu_count  # no sim workers: the learner has the machine

    @property
    def learner(self) -> OfflineLearner:
        algo = self.runner.algo
        if not isinstance(algo, OfflineLearner):
            raise ConfigError(
                f"algo={self.runner.cfg.algo.name}: the offline loop trains learners of stored "
                "frames (unilab.algos.offline.OfflineLearner: behaviour cloning, world models)"
            )
        return algo

    # -- inputs -------------------------------------------------------------------------
    def check_inputs(self) -> None:
        cfg = self.runner.cfg
        name, store = cfg.algo.name, cfg.data.store
        if self.frames is None:
            if not store:
                raise ConfigError(
                    f"algo={name} learns offline from an episode store of demonstrations: "
                    "set data.store=PATH (a store written by the scripted experts, `unilab "
                    "play ... record=`, HIL sessions or `unilab data import-lerobot`)"
                )
            raise ConfigError(
                f"algo={name}: this Runner was given no frames; unilab.workflows.train.train"
                f"(cfg) opens data.store={store} (or pass Runner(cfg, frames=FrameDataset(...)))"
            )
        where = f"data.store={store}" if store else "the frame source"
        if len(self.frames) == 0:
            raise ConfigError(f"{where} holds no frames to learn from")
        learner = self.learner
        need = learner.required_fields()
        probe = self.frames.batch(np.array([0]))
        present = sorted(k for k in probe if k not in ("episode_index", "frame_index"))
        missing = [f for f in need if f not in probe]
        if missing:
            raise ConfigError(
                f"{where} lacks field(s) {missing} that algo={name} reads on task "
                f"{cfg.task.name!r}; it has {present}"
            )
        wrong = [
            f"{f} is {tuple(probe[f].shape[1:])} per frame, the policy wants {shape}"
            for f, shape in need.items()
            if tuple(probe[f].shape[1:]) != shape
        ]
        if wrong:
            raise ConfigError(
                f"{where} does not fit algo={name} on task {cfg.task.name!r} (cameras, image "
                f"size and instruction length come from the task config): {'; '.join(wrong)}"
            )

    # -- checkpoints --------------------------------------------------------------------
    def resumed(self, path: Any, state: dict[str, Any]) -> None:
        runner, step = self.runner, self.learner.step
        if step != runner.iteration:
            raise ConfigError(
                f"resume: {path.name} says iteration {runner.iteration} but holds a learner at "
                f"step {step}"
            )
        runner.notes.append(
            f"resumed from {path.name} at step {step} (bit-exact: the batch of each step "
            "depends on the seed and the step only)"
        )

    # -- the loop -----------------------------------------------------------------------
    def prepare(self) -> None:
        cfg = self.runner.cfg
        assert self.frames is not None
        try:
            self.trainer = OfflineTrainer(
                self.learner, self.frames, seed=cfg.run.seed, prefetch=cfg.data.prefetch
            )
        except ValueError as exc:
            raise ConfigError(f"data.store={cfg.data.store}: {exc}") from None
        frames = self.trainer.train_items.size + self.trainer.val_items.size
        self.runner.notes.append(
            f"offline: {self.trainer.train_items.size} training frames, "
            f"{self.trainer.val_items.size} held out ({frames} used)"
        )

    def run(self, bar: TrainingProgress, stop: StopSignal) -> str:
        runner, trainer, learner = self.runner, self.trainer, self.learner
        assert trainer is not None
        cfg, bc, prof = runner.cfg, runner.cfg.algo, runner.prof
        sums: dict[str, float] = {}
        count = 0
        self.start_step = learner.step
        t0 = time.perf_counter()
        trainer.start()
        reason = "budget"
        while learner.step < bc.steps and not stop:
            if runner.stop_requested:
                reason = "stopped"
                break
            elapsed = time.perf_counter() - t0
            if cfg.run.max_wall_s and elapsed > cfg.run.max_wall_s:
                reason = "wall_time"
                break
            with prof.section("update"):
                metrics = trainer.step()
            runner.iteration = learner.step
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v
            count += 1
            elapsed = time.perf_counter() - t0
            rate = trainer.steps_done * bc.batch_size / max(elapsed, 1e-9)
            bar.update(runner.iteration, rate, metrics.get("loss"))
            info = IterationInfo(runner.iteration, runner.env_steps, None, {}, metrics, None)
            runner.call_hooks("on_iteration", info)
            row: dict[str, float] = {}
            if runner.iteration % cfg.logging.log_every == 0 or runner.iteration == bc.steps:
                self.train_means = {k: v / count for k, v in sums.items()}
                sums, count = {}, 0
                row = {f"algo/{k}": v for k, v in self.train_means.items()}
                row["train/samples_per_s"] = rate
                row["train/samples"] = float(runner.iteration * bc.batch_size)
                row["train/wall_s"] = elapsed
                row["runtime/update_s"] = prof.totals.get("update", 0.0)
            if runner.iteration % bc.val_every == 0:
                row.update(self._validate())
            row.update(info.log)
            if row:
                runner.log(row)
            if runner.iteration % cfg.run.checkpoint_every == 0:
                runner.save()
        if not stop and runner.iteration % bc.val_every != 0:  # the end, unless just done
            row = self._validate()
            if row:
                runner.log(row)
        if not stop and reason != "stopped":
            self._calibrate(bar)
        self.seconds = time.perf_counter() - t0
        return reason

    def _validate(self) -> dict[str, float]:
        assert self.trainer is not None
        if self.trainer.val_items.size == 0:
            return {}
        with self.runner.prof.section("validate"):
            self.validation = self.trainer.validate()
        return {f"val/{k.removeprefix('val_')}": v for k, v in self.validation.items()}

    def _calibrate(self, bar: TrainingProgress) -> None:
        """Post-hoc calibration of the value heads on the held-out episodes, before the
        final checkpoint (`OfflineTrainer.calibrate`)."""
        assert self.trainer is not None
        try:
            with self.runner.prof.section("calibrate"):
                fitted = self.trainer.calibrate()
        except ValueError as exc:  # e.g. every held-out episode succeeded
            bar.print(f"value heads left uncalibrated: {exc}")
            return
        if fitted:
            self.runner.log({f"val/{k}": v for k, v in fitted.items()})
            self.calibration = fitted
            bar.print(
                f"P(success) calibrated on {fitted['calibration_frames']:.0f} held-out frames: "
                f"sigmoid({fitted['success_scale']:.3g} z + {fitted['success_bias']:.3g}); "
                f"Brier {fitted['success_brier_raw']:.3f} -> "
                f"{fitted['success_brier_calibrated']:.3f} (in-sample)"
            )

    def finish(self) -> None:
        if self.trainer is not None:
            self.trainer.close()

    def summary(self, result: RunResult, wall: float) -> tuple[dict[str, Any], str]:
        runner, bc = self.runner, self.runner.cfg.algo
        done = result.iterations - self.start_step
        rate = done * bc.batch_size / max(self.seconds, 1e-9)
        loss = self.train_means.get("loss", math.nan)
        val = self.validation
        text = (
            f"done: {result.iterations} gradient steps of batch {bc.batch_size} "
            f"({done} in this session) in {wall:.1f} s ({rate:,.0f} samples/s); "
            f"training loss {loss:.4g}"
        )
        if val:
            shown = [f"{k.removeprefix('val_').replace('_', ' ')} {v:.4g}" for k, v in val.items()]
            text += "; held-out " + ", ".join(s for s in shown if not s.startswith("frames "))
        summary = {
            "iterations": result.iterations,
            "steps": result.iterations,
            "batch_size": bc.batch_size,
            "wall_s": wall,
            "loop_s": self.seconds,
            "samples_per_s": rate,
            "stop_reason": result.stop_reason,
            "train": self.train_means,
            "validation": val,
            "calibration": self.calibration,
            "data": {
                "store": runner.cfg.data.store,
                "train_frames": int(self.trainer.train_items.size) if self.trainer else 0,
                "val_frames": int(self.trainer.val_items.size) if self.trainer else 0,
            },
            "profile_s": runner.prof.snapshot(),
        }
        return summary, text
