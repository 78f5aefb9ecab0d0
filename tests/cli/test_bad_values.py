"""Every bad value is one message and exit code 2 before anything starts: no traceback, no
run directory (issue 11: values a new user tried)."""

from __future__ import annotations

from pathlib import Path

import pytest

from unilab.cli import main


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["task.reward_weights.bogus=1"], ["task.reward_weights.bogus", "1", "upright"]),
        (["task=arm_reach", "task.tracking_sigma=0"], ["tracking_sigma", "0.0"]),
        (["sim.max_abs_qpos=0"], ["sim.max_abs_qpos=0", "> 0"]),
        (
            ["task.randomization.friction_scale=[2,1]"],
            ["task.randomization.friction_scale", "(2.0, 1.0)"],
        ),
        (["logging.log_every=0"], ["logging.log_every=0", ">= 1"]),
        (["run.checkpoint_every=0"], ["run.checkpoint_every=0", ">= 1"]),
        (["algo.lr=nan"], ["algo.lr=nan", "not finite"]),
        (["task=mjcf", "task.mjcf_path=/no/such/model.xml"], ["/no/such/model.xml"]),
    ],
)
def test_bad_value_stops_before_anything_starts(
    overrides: list[str],
    named: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", *overrides, "--quiet"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("unilab train: error: ")
    for text in named:
        assert text in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert list(tmp_path.iterdir()) == []  # no runs/ directory, nothing written
