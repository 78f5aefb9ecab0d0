"""The training-time Rerun hook: records every K iterations, a few envs per file."""

from __future__ import annotations

from pathlib import Path

from rerun.chunk import RrdReader

from unilab.config import compose
from unilab.train import Runner
from unilab.viz.training_recorder import TrainingRecorder


def test_records_every_k_iterations_with_one_tree_per_env(tmp_path: Path) -> None:
    cfg = compose(
        ["task=cartpole_balance", "algo=ppo", "algo.actor_hidden=[16]", f"run.out_dir={tmp_path}"]
    )
    recorder = TrainingRecorder(tmp_path, every=5, steps=20, num_envs=2)
    runner = Runner(cfg, [recorder])  # built, not started: no worker runs here
    recorder.on_start(runner)
    written = [recorder.maybe_record(i, runner.policy) for i in range(1, 11)]
    runner.close()
    assert [p is not None for p in written] == [i % 5 == 0 for i in range(1, 11)]
    assert recorder.recordings == [
        tmp_path / "train_000000005.rrd",
        tmp_path / "train_000000010.rrd",
    ]
    assert recorder.seconds > 0.0
    rows: dict[str, int] = {}
    for chunk in RrdReader(recorder.recordings[-1]).stream().to_chunks():
        if not chunk.is_static:
            rows[chunk.entity_path] = rows.get(chunk.entity_path, 0) + chunk.num_rows
    for env in (0, 1):
        assert rows[f"/env_{env}/world/bodies/pole"] == 21
        assert rows[f"/env_{env}/reward/total"] == 21
