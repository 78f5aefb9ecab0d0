"""The real `unilab train` (a child process) under Ctrl-C: it stops within seconds, writes
the final checkpoint at the iteration it reached, its summary, and leaves no shared memory."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from unilab.runtime.shm import list_segments
from unilab.utils.checkpoint import list_checkpoints, load_checkpoint


def test_ctrl_c_on_unilab_train_writes_the_final_checkpoint(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "unilab.cli",
        "train",
        "--quiet",
        "task=cartpole_balance",
        "sim.num_envs=16",
        "runtime.chunk_len=16",
        "run.total_env_steps=1000000000",
        "run.checkpoint_every=1000",
        "run.export=false",
        "logging.tensorboard=false",
        f"run.out_dir={tmp_path}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    metrics: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        metrics = list(tmp_path.glob("cartpole_balance/ppo/*/metrics.jsonl"))
        if metrics and len(metrics[0].read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert metrics, "no metrics written in time"
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 20
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    run = metrics[0].parent
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "signal" and summary["iterations"] >= 3
    (final,) = list_checkpoints(run / "checkpoints")  # none periodic: only the final one
    assert load_checkpoint(final)["iteration"] == summary["iterations"]
    assert list_segments(f"unilab_{proc.pid}_") == []
    assert not list(run.rglob("*.tmp"))
