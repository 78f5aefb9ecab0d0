"""The tool hooks `unilab train` attaches to its `Runner`: episode recording and, at the end,
export and play. (The Rerun hook is `unilab.viz.training_recorder.TrainingRecorder`; the
mid-run evaluation is `unilab.train.eval_hook.EvalHook`.)"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.train.hooks import IterationInfo, RunResult, TrainHook

if TYPE_CHECKING:
    from unilab.data.recorder import ChunkRecorder
    from unilab.train.runner import Runner


class EpisodeRecordHook(TrainHook):
    """Whole training episodes out of each batch into an episode store
    (`logging.record_store`; `unilab.data.recorder.ChunkRecorder` documents what is kept)."""

    name = "record"
    handles = ("logging.record_store",)

    def __init__(self, store: str | Path, every_n_batches: int = 1, max_envs: int = 64) -> None:
        self.store, self.every_n_batches, self.max_envs = store, every_n_batches, max_envs
        self.recorder: ChunkRecorder | None = None

    def on_start(self, runner: Runner) -> None:
        from unilab.data.recorder import ChunkRecorder

        runtime = runner.runtime
        assert runtime is not None
        cfg, meta = runner.cfg, runner.shapes.metadata
        self.recorder = ChunkRecorder(
            self.store,
            runner.chunk_fields(with_info=False),
            num_envs=runtime.envs_per_worker * runtime.num_workers,
            envs_per_block=runtime.envs_per_worker,
            fps=1.0 / meta["control_dt"],
            every_n_batches=self.every_n_batches,
            max_envs=self.max_envs,
            meta={"task": cfg.task.name, "robot": meta["robot"], "seed": cfg.run.seed},
        )
        runner.notes.append(f"recording episodes to {self.store}")

    def on_iteration(self, runner: Runner, it: IterationInfo) -> None:
        assert self.recorder is not None and it.batch is not None
        batch = it.batch
        self.recorder.record(
            it.host_batch,
            batch.policy_versions,
            continuous=not batch.events and batch.dropped_stale == 0,
        )

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None


class ExportPlayHook(TrainHook):
    """At the end: export the policy (ONNX, + TorchScript for the MLP policies) and play it
    into `media/`
    (`run.export`, `run.play_episodes`). A failure is reported, not raised: the checkpoint
    is safe, and `unilab train` exits 1."""

    name = "export"
    handles = ("run.export",)

    def __init__(self, play_episodes: int = 1, max_steps: int = 500) -> None:
        self.play_episodes, self.max_steps = play_episodes, max_steps

    def on_end(self, runner: Runner, result: RunResult) -> None:
        from unilab.export.run_export import export_run

        try:
            paths = export_run(result.run.path)
            shown = [str(paths[k]) for k in ("onnx", "torchscript") if k in paths]
            print(f"exported: {' and '.join(shown)}", file=sys.stderr)
            if self.play_episodes > 0:
                # Imported only to play: playing needs rerun-sdk, training and export do not.
                from unilab.deploy.play import play_run

                media = play_run(
                    result.run.path,
                    episodes=self.play_episodes,
                    video=True,
                    max_steps=self.max_steps,
                )
                for note in media.notes:
                    print(note, file=sys.stderr)
                shown = [str(p) for p in (media.video, media.rrd) if p is not None]
                print(f"media: {', '.join(shown)}", file=sys.stderr)
        except Exception as exc:  # the checkpoint is safe; say what failed and exit non-zero
            problem = f"export/play failed ({type(exc).__name__}): {exc}"
            print(problem, file=sys.stderr)
            result.problems.append(problem)
