"""The `segment` label column rewrite (`unilab.data.relabel.write_column`), the `weight`
hook of `FrameDataset`, and `WeightedFrameSampler`, on real stores of `store_helpers`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from store_helpers import SMALL_CHUNKS, Expected, assert_store_matches, make_episode, make_meta

from unilab.data import EpisodeStore, FieldSpec, StoreSchema
from unilab.data.dataset import FrameDataset
from unilab.data.errors import ReadOnlyStoreError, SchemaMismatchError
from unilab.data.relabel import RELABEL_PREFIX, label_columns, write_column
from unilab.data.sampler import WeightedFrameSampler
from unilab.data.schema import SEGMENTS


def test_write_column_replaces_segment_and_keeps_everything_else(filled_store: Path) -> None:
    with EpisodeStore.open(filled_store, "a") as st:
        n = st.num_frames
        labels = (np.arange(n) * 3 % len(SEGMENTS)).astype(np.uint8)
        write_column(st, "segment", labels)
        np.testing.assert_array_equal(st.read("segment"), labels)  # the open store sees it
    with EpisodeStore.open(filled_store, "r") as st:
        np.testing.assert_array_equal(st.read("segment"), labels)
        assert [st.meta(k) for k in range(len(st))] == [make_meta(k) for k in range(10)]
        for name in SMALL_CHUNKS:
            if name == "segment":
                continue
            want = np.concatenate([make_episode(k)[name] for k in range(10)])
            np.testing.assert_array_equal(st.read(name), want, err_msg=name)
    assert not [p for p in filled_store.iterdir() if p.name.startswith(RELABEL_PREFIX)]


def test_write_column_takes_label_names_and_appends_still_work(filled_store: Path) -> None:
    with EpisodeStore.open(filled_store, "a") as st:
        n = st.num_frames
        names = np.array(["idle", "progress"] * (n // 2) + ["failure"] * (n % 2))
        write_column(st, "segment", names)
        st.append_episodes([(make_episode(10), make_meta(10))])
        got = st.read("segment")
    assert [SEGMENTS[c] for c in got[:n]] == names.tolist()
    np.testing.assert_array_equal(got[n:], make_episode(10)["segment"])


def test_write_column_errors_name_the_problem(filled_store: Path) -> None:
    with EpisodeStore.open(filled_store, "a") as st:
        n = st.num_frames
        with pytest.raises(SchemaMismatchError, match=rf"expected {n} frames"):
            write_column(st, "segment", np.zeros(n - 1, dtype=np.uint8))
        with pytest.raises(SchemaMismatchError, match=r"\['oops'\] are not in \['none', 'prog"):
            write_column(st, "segment", np.array(["oops"] * n))
        with pytest.raises(SchemaMismatchError, match=r"codes must be in \[0, 4\]"):
            write_column(st, "segment", np.full(n, 7, dtype=np.uint8))
        with pytest.raises(SchemaMismatchError, match=r"only label columns can \(segment, token\)"):
            write_column(st, "obs/policy", np.zeros((n, 5), dtype=np.float32))
        assert label_columns(st) == ["segment", "token"]
    with (
        EpisodeStore.open(filled_store, "r") as st,
        pytest.raises(ReadOnlyStoreError, match="open it with 'a'"),
    ):
        write_column(st, "segment", np.zeros(st.num_frames, dtype=np.uint8))
    with EpisodeStore.open(filled_store, "r") as st:  # nothing above changed the store
        assert_store_matches(st, Expected())


def _weighted_store(path: Path, weights: list[np.ndarray]) -> Path:
    schema = StoreSchema.build(
        obs={"policy": 2}, action=1, extra={"weight": FieldSpec((), "float32")}
    )
    with EpisodeStore.create(path, schema) as st:
        for k, w in enumerate(weights):
            n = w.size
            end = np.zeros(n, dtype=bool)
            end[-1] = True
            frames = {
                "obs/policy": np.full((n, 2), k, dtype=np.float32),
                "action": np.arange(n, dtype=np.float32)[:, None],
                "reward": np.zeros(n, dtype=np.float32),
                "terminated": end if k == 0 else ~end & end,
                "truncated": end if k > 0 else ~end & end,
                "origin": "sim",
                "weight": w.astype(np.float32),
            }
            st.append_episodes([(frames, {"task": "t", "fps": 20.0})])
    return path


def test_dataset_item_weights_read_the_weight_column(tmp_path: Path) -> None:
    w = [np.array([1.0, 0.5, 2.0]), np.array([0.0, 3.0])]
    path = _weighted_store(tmp_path / "w.zarr", w)
    data = FrameDataset(path, fields=["obs/policy"])
    np.testing.assert_allclose(data.item_weights, np.concatenate(w))
    data.close()
    data = FrameDataset(path, fields=["obs/policy"], n_step=2)
    # The truncated episode's last frame is no n-step item; the others keep their weights.
    np.testing.assert_array_equal(data.indices, [0, 1, 2, 3])
    np.testing.assert_allclose(data.item_weights, np.concatenate(w)[data.indices])
    data.close()


def test_dataset_without_weight_column_weighs_items_one(filled_store: Path) -> None:
    data = FrameDataset(filled_store, fields=["obs/policy"])
    np.testing.assert_array_equal(data.item_weights, np.ones(len(data)))
    data.close()


def test_weighted_sampler_draws_in_proportion_to_weights(tmp_path: Path) -> None:
    w = [np.array([1.0, 0.0, 2.0]), np.array([4.0, 1.0])]
    path = _weighted_store(tmp_path / "w.zarr", w)
    data = FrameDataset(path, fields=["obs/policy"])
    sampler = WeightedFrameSampler(data, 40_000, seed=3)
    data.close()
    drawn = np.fromiter(iter(sampler), dtype=np.int64)
    assert drawn.size == len(sampler) == 40_000
    freq = np.bincount(drawn, minlength=5) / drawn.size
    want = np.concatenate(w) / 8.0
    assert freq[1] == 0.0  # weight 0 is never drawn
    np.testing.assert_allclose(freq, want, atol=0.01)
    again = WeightedFrameSampler(np.concatenate(w), 10, seed=3).draw(10)
    np.testing.assert_array_equal(
        again, WeightedFrameSampler(np.concatenate(w), 10, seed=3).draw(10)
    )


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (np.zeros(3), "every item has weight 0"),
        (np.array([1.0, -1.0]), "finite values >= 0"),
        (np.array([1.0, np.nan]), "finite values >= 0"),
        (np.ones((2, 2)), "1-d array"),
    ],
)
def test_weighted_sampler_rejects_bad_weights(weights: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WeightedFrameSampler(weights, 4)
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        WeightedFrameSampler(np.ones(3), 0)
