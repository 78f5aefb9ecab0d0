"""Exploration-token discovery: the adjusted Rand index against hand-computed values,
deterministic k-means for a seed, tokens that recover the toy store's two strategies, the
`token` column rewritten in place (nothing else), and the CLI's report and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from unilab.bench.vla_toy import write_toy_store
from unilab.cli import main
from unilab.data.store import EpisodeStore
from unilab.data.token_discovery import (
    TokenDiscoveryConfig,
    adjusted_rand_index,
    discover_store_tokens,
    discover_tokens,
)


def test_adjusted_rand_index_known_values() -> None:
    assert adjusted_rand_index([0, 0, 1, 1], [1, 1, 0, 0]) == pytest.approx(1.0)
    # Pairs: 1 agreeing pair of 6; rows 1, cols 2 -> expected 1*2/6; (1 - 1/3)/(1.5 - 1/3).
    assert adjusted_rand_index([0, 0, 1, 2], [0, 0, 1, 1]) == pytest.approx(4 / 7)
    # One cluster against singletons: index 0, expected 0 -> 0.
    assert adjusted_rand_index([0, 0, 0, 0], [0, 1, 2, 3]) == pytest.approx(0.0)
    # Worse than chance is negative.
    assert adjusted_rand_index([0, 0, 1, 1], [0, 1, 0, 1]) < 0
    with pytest.raises(ValueError, match="differ in length"):
        adjusted_rand_index([0, 1], [0, 1, 1])


def three_modes(seed: int, episodes: int = 30) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Episodes of random length whose 2-D actions follow one of three shapes."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(12, 30, episodes)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    modes = np.arange(episodes) % 3
    rows = []
    for n, m in zip(lengths, modes, strict=True):
        t = np.linspace(0, 1, n)
        shape = [np.sin(np.pi * t), -np.sin(np.pi * t), np.cos(np.pi * t)][m]
        rows.append(np.stack([shape, t], 1) + rng.normal(0, 0.05, (n, 2)))
    return np.concatenate(rows).astype(np.float32), starts, lengths


@pytest.mark.parametrize("granularity", ["episode", "frame"])
def test_same_seed_same_tokens_and_episode_tokens_find_the_modes(granularity: str) -> None:
    actions, starts, lengths = three_modes(0)
    cfg = TokenDiscoveryConfig(tokens=3, granularity=granularity, seed=7)
    a = discover_tokens(actions, starts, lengths, cfg)
    b = discover_tokens(actions, starts, lengths, cfg)
    np.testing.assert_array_equal(a.frame_tokens, b.frame_tokens)
    assert a.frame_tokens.shape == (int(lengths.sum()),) and a.frame_tokens.dtype == np.int32
    assert a.frame_tokens[0] == 0  # numbered by first appearance
    assert sum(a.counts) == int(lengths.sum())
    if granularity == "episode":
        truth = np.repeat(np.arange(len(lengths)) % 3, lengths)
        assert adjusted_rand_index(a.frame_tokens, truth) == pytest.approx(1.0)
        # Every frame of an episode carries the episode's token.
        assert all(
            len(set(a.frame_tokens[s : s + n])) == 1 for s, n in zip(starts, lengths, strict=True)
        )


def test_bad_settings_and_data_are_named() -> None:
    actions, starts, lengths = three_modes(0, episodes=6)
    with pytest.raises(ValueError, match="tokens=1 must be at least 2"):
        discover_tokens(actions, starts, lengths, TokenDiscoveryConfig(tokens=1))
    with pytest.raises(ValueError, match="granularity"):
        discover_tokens(actions, starts, lengths, TokenDiscoveryConfig(granularity="step"))
    with pytest.raises(ValueError, match="cannot form 8 clusters"):
        discover_tokens(actions, starts, lengths, TokenDiscoveryConfig(tokens=8))
    bad = actions.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        discover_tokens(bad, starts, lengths, TokenDiscoveryConfig(tokens=2))


def test_store_tokens_recover_the_toy_modes_and_only_the_token_column_changes(
    tmp_path: Path,
) -> None:
    path = write_toy_store(tmp_path / "toy.zarr", episodes=12)
    with EpisodeStore.open(path, "a") as st:  # forget the toy's own tokens first
        from unilab.data.relabel import write_column

        write_column(st, "token", np.full(st.num_frames, -1, np.int32))
        actions_before = st.read("action").copy()
    doc = discover_store_tokens(str(path), TokenDiscoveryConfig(tokens=2, seed=3))
    assert doc["written"] and doc["ari"] == pytest.approx(1.0)
    assert doc["purity"] == [1.0, 1.0] and sum(doc["counts"]) == doc["frames"]
    with EpisodeStore.open(path, "r") as st:
        tokens, modes = st.read("token"), st.read("mode")
        np.testing.assert_array_equal(st.read("action"), actions_before)
    assert adjusted_rand_index(tokens, modes) == pytest.approx(1.0)
    assert set(tokens.tolist()) == {0, 1}


def test_cli_reports_and_dry_run_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_toy_store(tmp_path / "toy.zarr", episodes=8)
    with EpisodeStore.open(path, "r") as st:
        before = st.read("token").copy()
    args = ["data", "tokens", str(path), "--tokens", "3", "--dry-run", "--json", "--seed", "1"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["written"] is False and doc["tokens"] == 3 and "ari" in doc
    assert set(doc["table"]) == {"token 0", "token 1", "token 2"}
    with EpisodeStore.open(path, "r") as st:
        np.testing.assert_array_equal(st.read("token"), before)
    assert main(["data", "tokens", str(path), "--tokens", "2"]) == 0
    assert "adjusted Rand index 1.000" in capsys.readouterr().out
    assert main(["data", "tokens", str(path), "--tokens", "1"]) == 2
    assert "--tokens=1 must be at least 2" in capsys.readouterr().err
    assert main(["data", "tokens", str(tmp_path / "none.zarr")]) == 2
