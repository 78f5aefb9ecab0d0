"""`unilab data segment` and `unilab data curate` end to end on a tiny ground-truth store,
and their errors on bad input (one message naming the valid values, exit code 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from unilab.cli import main
from unilab.data.store import EpisodeStore


@pytest.fixture
def store(ground_truth_store: Path, tmp_path: Path) -> Path:
    path = tmp_path / "round1.zarr"
    shutil.copytree(ground_truth_store, path)
    return path


def _json(capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    out = capsys.readouterr().out
    return json.loads(out)


def test_segment_then_curate_end_to_end(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    critic = tmp_path / "critic.pt"
    argv = ["data", "segment", str(store), "--steps", "60", "--save-critic", str(critic)]
    assert main([*argv, "--json", "--quiet"]) == 0
    doc = _json(capsys)
    assert doc["critic"] == str(critic) and critic.is_file()
    assert doc["training"]["pairs"] > 0
    counts = doc["labels"]["counts"]
    with EpisodeStore.open(store, "r") as st:
        seg = st.read("segment")
        assert counts == {
            n: int((seg == c).sum())
            for c, n in enumerate(["none", "progress", "idle", "failure", "recovery"])
        }
        human = st.read("is_intervention")
    assert counts["none"] == 0 and counts["progress"] > 0
    assert (seg[human] == 4).all()  # operator frames are recovery

    # Labelling again with the saved critic and other thresholds: no training.
    assert main(["data", "segment", str(store), "--critic", str(critic), "--min-idle", "40",
                 "--min-failure", "40", "--json", "--quiet"]) == 0  # fmt: skip
    doc = _json(capsys)
    assert "training" not in doc
    assert doc["labels"]["counts"]["idle"] + doc["labels"]["counts"]["failure"] <= (
        counts["idle"] + counts["failure"]
    )

    out = tmp_path / "round2.zarr"
    assert main(["data", "curate", str(store), "--out", str(out), "--idle-weight", "0.5",
                 "--json", "--quiet"]) == 0  # fmt: skip
    cur = _json(capsys)
    with EpisodeStore.open(out, "r") as st:
        weight, seg2 = st.read("weight"), st.read("segment")
        assert cur["frames"] == st.num_frames and cur["episodes"] == len(st)
    np.testing.assert_allclose(weight[seg2 == 2], 0.5)
    np.testing.assert_allclose(weight[seg2 != 2], 1.0)
    assert not (seg2 == 3).any()  # failure dropped by default
    assert cur["kept_by_label"]["idle"] == int((seg2 == 2).sum())

    # The text form says what happened.
    assert main(["data", "curate", str(store), "--out", str(out), "--overwrite", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("curated ") and "dropped" in text


def test_train_only_writes_no_labels(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    critic = tmp_path / "c.pt"
    argv = ["data", "segment", str(store), "--train-only", "--steps", "5"]
    assert main([*argv, "--save-critic", str(critic), "--quiet"]) == 0
    assert "trained the progress model" in capsys.readouterr().out
    assert critic.is_file()
    with EpisodeStore.open(store, "r") as st:
        assert not st.read("segment").any()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--failure-threshold", "0.5", "--progress-threshold", "0.2"], "must be below"),
        (["--min-idle", "0"], "--min-idle=0 must be >= 1"),
        (["--fields", "obs/nope", "--steps", "1"], "valid: ['obs/policy']"),
        (["--critic", "{tmp}/missing.pt"], "missing.pt does not exist"),
        (["--critic", "{tmp}/x.pt", "--train-only"], "--critic labels with an existing model"),
    ],
)
def test_segment_bad_input_is_one_clear_message(
    store: Path,
    tmp_path: Path,
    extra: list[str],
    named: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    assert main(["data", "segment", str(store), "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("unilab data segment: error: "), err
    assert named in err[0], err[0]
    with EpisodeStore.open(store, "r") as st:
        assert not st.read("segment").any()  # nothing was written


def test_curate_bad_input_is_one_clear_message(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out.zarr")
    cases = [
        (["data", "curate", str(store), "--out", out], "every frame's segment is 'none'"),
        (["data", "curate", str(store), "--out", out, "--idle-weight", "-1"], "--idle-weight=-1"),
        (["data", "curate", str(tmp_path / "nope.zarr"), "--out", out], "nope.zarr"),
        (["data", "curate", str(store), "--out", str(store)], "is the source store"),
    ]
    for argv, named in cases:
        assert main([*argv, "--quiet"]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("unilab data curate: error: "), err
        assert named in err[0], err[0]
    assert not (tmp_path / "out.zarr").exists()
