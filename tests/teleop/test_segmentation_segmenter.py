"""The segmentation critic on real sim episodes with known segments (the ground-truth
generator: scripted idle and failure-inducing spans, operator recoveries), and the
segmenter's thresholds, minimum lengths and recovery rule on rates given directly."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.config.errors import ConfigError
from unilab.data.store import EpisodeStore
from unilab.teleop.segmentation import (
    ProgressModel,
    ProgressModelConfig,
    SegmentConfig,
    label_store,
    load_progress_model,
    save_progress_model,
    segment_episode,
    train_progress_model,
)
from unilab.teleop.segmentation.ground_truth import TRUE_FIELD, MixConfig, generate
from unilab.teleop.segmentation.scoring import confusion, scores
from unilab.teleop.segmentation.segmenter import FAILURE, IDLE, PROGRESS, RECOVERY, runs

# Every episode gets a long idle span and a recovered failure: the spans to find.
KNOWN = MixConfig(
    clean_fraction=0.0,
    idle_probability=1.0,
    failure_probability=1.0,
    unrecovered_fraction=0.0,
    idle_steps=(25, 30),
    failure_steps=(10, 14),
)


@pytest.fixture(scope="module")
def known_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("known") / "known.zarr"
    generate(path, 8, seed=11, mix=KNOWN, num_envs=8)
    return path


def _recalls(store: Path, model: ProgressModel, cfg: SegmentConfig) -> dict[str, float]:
    label_store(store, model, cfg)
    with EpisodeStore.open(store, "r") as st:
        s = scores(confusion(st.read(TRUE_FIELD), st.read("segment")))
    return {name: c["recall"] for name, c in s["per_class"].items()}


def _meets(recall: dict[str, float]) -> bool:
    return (
        recall["progress"] >= 0.75
        and recall["idle"] >= 0.4
        and recall["failure"] >= 0.5
        and recall["recovery"] == 1.0
    )


def test_trained_critic_finds_scripted_idle_and_failure_spans(
    known_store: Path, tiny_critic: ProgressModel, ground_truth_store: Path
) -> None:
    """Held-out episodes (another generator seed) with a scripted idle span and a scripted
    failure each: the critic trained on the mixed store labels most of each span right.
    An untrained model of the same shape misses them: the check can fail."""
    cfg = SegmentConfig()
    recall = _recalls(known_store, tiny_critic, cfg)
    assert _meets(recall), recall
    untrained, _ = train_progress_model(
        ground_truth_store, ProgressModelConfig(steps=1, hidden=64, batch_size=256)
    )
    baseline = _recalls(known_store, untrained, cfg)
    assert not _meets(baseline), baseline


def test_label_store_writes_only_the_segment_column(
    ground_truth_store: Path, tiny_critic: ProgressModel, tmp_path: Path
) -> None:
    path = tmp_path / "copy.zarr"
    shutil.copytree(ground_truth_store, path)
    with EpisodeStore.open(path, "r") as st:
        before = {n: st.read(n) for n in st.schema.fields if n != "segment"}
        metas = st.all_meta()
        assert not st.read("segment").any()  # the generator leaves `segment` at none
    result = label_store(path, tiny_critic, SegmentConfig())
    with EpisodeStore.open(path, "r") as st:
        seg = st.read("segment")
        for name, want in before.items():
            np.testing.assert_array_equal(st.read(name), want, err_msg=name)
        assert st.all_meta() == metas
    assert result.frames == seg.size and result.episodes == 24
    assert result.counts == {
        name: int((seg == code).sum())
        for code, name in enumerate(("none", "progress", "idle", "failure", "recovery"))
    }
    assert result.counts["none"] == 0 and result.counts["progress"] > 0


def _cfg(**kw: float) -> SegmentConfig:
    """Exact labels: no smoothing, minimum lengths 1, no recovery window unless asked."""
    base: dict[str, float] = {
        "smooth": 1,
        "min_progress": 1,
        "min_idle": 1,
        "min_failure": 1,
        "recovery_window": 0,
    }
    base.update(kw)
    return SegmentConfig(**base)  # type: ignore[arg-type]


def _labels(rates: list[float], cfg: SegmentConfig, human: list[bool] | None = None) -> list[int]:
    h = np.zeros(len(rates), dtype=bool) if human is None else np.asarray(human)
    return segment_episode(np.asarray(rates), h, cfg)[0].tolist()


P, F, R = PROGRESS, FAILURE, RECOVERY

RATES = [1.0] * 6 + [0.3] * 6 + [-1.0] * 6 + [0.5] * 6


def test_thresholds_cut_progress_idle_failure() -> None:
    assert _labels(RATES, _cfg()) == [P] * 6 + [IDLE] * 6 + [F] * 6 + [P] * 6
    # A lower progress threshold makes the 0.3-rate span progress.
    assert _labels(RATES, _cfg(progress_threshold=0.2)) == [P] * 12 + [F] * 6 + [P] * 6
    # A lower failure threshold makes the -1 span idle.
    assert _labels(RATES, _cfg(failure_threshold=-2.0)) == [P] * 6 + [IDLE] * 12 + [P] * 6
    # A higher progress threshold makes the 0.5-rate span idle.
    assert (
        _labels(RATES, _cfg(progress_threshold=0.6)) == [P] * 6 + [IDLE] * 6 + [F] * 6 + [IDLE] * 6
    )


def test_minimum_lengths_merge_short_runs() -> None:
    blip = [1.0] * 10 + [0.0] * 3 + [1.0] * 10 + [-1.0] * 2 + [1.0] * 10
    assert _labels(blip, _cfg()) == [P] * 10 + [IDLE] * 3 + [P] * 10 + [F] * 2 + [P] * 10
    assert _labels(blip, _cfg(min_idle=4)) == [P] * 23 + [F] * 2 + [P] * 10
    assert _labels(blip, _cfg(min_idle=4, min_failure=3)) == [P] * 35
    assert _labels(blip, _cfg(min_idle=3, min_failure=2)) == _labels(blip, _cfg())
    # Random rates: after merging, every run is at least its label's minimum.
    rng = np.random.default_rng(0)
    cfg = _cfg(min_progress=4, min_idle=6, min_failure=3)
    minimum = {P: 4, IDLE: 6, F: 3}
    for _ in range(20):
        got = np.asarray(_labels(rng.normal(0, 1, 120).tolist(), cfg))
        spans = runs(got)
        assert len(spans) == 1 or all(b - a >= minimum[lab] for lab, a, b in spans), spans


def test_recovery_is_operator_frames_and_progress_after_failure() -> None:
    rates = [1.0] * 5 + [-1.0] * 5 + [1.0] * 10
    assert _labels(rates, _cfg(recovery_window=4)) == [P] * 5 + [F] * 5 + [R] * 4 + [P] * 6
    assert _labels(rates, _cfg(recovery_window=0)) == [P] * 5 + [F] * 5 + [P] * 10
    human = [False] * 12 + [True] * 3 + [False] * 5
    assert _labels(rates, _cfg(), human) == [P] * 5 + [F] * 5 + [P] * 2 + [R] * 3 + [P] * 5


def test_smoothing_averages_rates() -> None:
    # One frame at -1 between progress: raw it is failure; a 5-wide average (0.6) hides it.
    rates = [1.0] * 8 + [-1.0] + [1.0] * 8
    assert _labels(rates, _cfg())[8] == F
    assert _labels(rates, _cfg(smooth=5)) == [P] * 17


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        (
            {"failure_threshold": 0.5, "progress_threshold": 0.2},
            "failure_threshold=0.5 must be below",
        ),
        ({"min_idle": 0}, "min_idle=0 must be >= 1"),
        ({"window": 0}, "window=0 must be >= 1"),
    ],
)
def test_bad_segment_config_names_the_value(kw: dict[str, float], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        segment_episode(np.ones(5), np.zeros(5, dtype=bool), SegmentConfig(**kw))  # type: ignore[arg-type]


def test_progress_model_is_antisymmetric_and_round_trips(
    tiny_critic: ProgressModel, tmp_path: Path
) -> None:
    x = torch.randn(16, tiny_critic.dim)
    y = torch.randn(16, tiny_critic.dim)
    with torch.no_grad():
        d = tiny_critic(x, y)
        torch.testing.assert_close(tiny_critic(y, x), -d)
        assert torch.equal(tiny_critic(x, x), torch.zeros(16))
        path = save_progress_model(tiny_critic, tmp_path / "critic.pt")
        again = load_progress_model(path)
        torch.testing.assert_close(again(x, y), d)
    assert float(again.pace) == float(tiny_critic.pace) and again.fields == tiny_critic.fields
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="is not a progress model checkpoint"):
        load_progress_model(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_progress_model(tmp_path / "missing.pt")


def test_progress_model_rejects_fields_and_stores_it_cannot_use(
    ground_truth_store: Path,
) -> None:
    with pytest.raises(
        ValueError, match=r"\['obs/nope'\] are not vector fields .*valid: \['obs/policy'\]"
    ):
        train_progress_model(ground_truth_store, ProgressModelConfig(fields=["obs/nope"], steps=1))
