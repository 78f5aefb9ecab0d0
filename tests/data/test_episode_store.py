"""Round trip, schema checks and bad-input errors of the episode store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from store_helpers import (
    SMALL_CHUNKS,
    Expected,
    assert_store_matches,
    episode_frames,
    make_episode,
    make_meta,
    small_schema,
    snapshot,
)

from unilab.data import (
    EpisodeLengthError,
    EpisodeStore,
    EpisodeStoreError,
    FieldSpec,
    NotAStoreError,
    ReadOnlyStoreError,
    SchemaMismatchError,
    StoreLockedError,
    StoreSchema,
    validate,
)


def test_round_trip_values_exact(filled_store: Path) -> None:
    with EpisodeStore.open(filled_store, "r") as store:
        assert len(store) == 10
        assert_store_matches(store, Expected())
        for k in (0, 4, 9):
            ep = store.episode(k)
            want = make_episode(k)
            assert set(ep) == set(SMALL_CHUNKS)
            for name, arr in want.items():
                assert ep[name].dtype == np.dtype(SMALL_CHUNKS[name].dtype), name
                np.testing.assert_array_equal(ep[name], arr, err_msg=name)
            assert store.meta(k) == make_meta(k)
        assert store.episode(-1)["policy_version"][0] == 9
        assert [m.seed for m in store.all_meta()] == list(range(10))
    assert validate(filled_store, deep=True) == []


def test_build_schema_defaults_and_scalar_columns(store_path: Path) -> None:
    schema = StoreSchema.build(obs={"policy": 4}, action=2, images={"front": (16, 12)})
    assert schema.fields["images/front"].shape == (16, 12, 3)
    assert schema.fields["images/front"].chunk_frames == (256 * 1024) // (16 * 12 * 3)
    n = 6
    frames = {
        "obs/policy": np.random.default_rng(0).standard_normal((n, 4)),  # float64 -> float32
        "images/front": np.zeros((n, 16, 12, 3), np.uint8),  # equal to nothing special
        "action": np.ones((n, 2), np.float32),
        "reward": np.zeros(n, np.float32),
        "terminated": np.zeros(n, bool),
        "truncated": np.r_[np.zeros(n - 1, bool), True],
        "origin": "human",
        "segment": ["progress"] * 3 + ["idle"] * 3,
        "token": 2,
    }
    with EpisodeStore.create(store_path, schema) as store:
        store.append_episode(frames, {"fps": 10.0, "task": "stack"})
        ep = store.episode(0)
    np.testing.assert_array_equal(ep["obs/policy"], frames["obs/policy"].astype(np.float32))
    np.testing.assert_allclose(ep["timestamp"], np.arange(n) / 10.0)
    assert ep["origin"].tolist() == [2] * n
    assert ep["segment"].tolist() == [1, 1, 1, 2, 2, 2]
    assert ep["token"].tolist() == [2] * n
    assert ep["policy_version"].tolist() == [-1] * n
    assert not ep["is_intervention"].any()
    # An all-zero image chunk equals nothing zarr would skip: every chunk is on disk.
    assert validate(store_path, deep=True) == []


def test_fsync_data_and_read_rows(store_path: Path) -> None:
    EpisodeStore.create(store_path, small_schema()).close()
    with EpisodeStore.open(store_path, "a", fsync_data=True) as store:
        for k in range(4):
            store.append_episode(make_episode(k), make_meta(k))
    with EpisodeStore.open(store_path) as store:
        assert_store_matches(store, Expected())
        rows = np.array([[5, 0], [5, 20]])
        want = np.concatenate([make_episode(k)["images/cam"] for k in range(4)])[rows]
        np.testing.assert_array_equal(store.read_rows("images/cam", rows), want)
        with pytest.raises(IndexError, match="committed range"):
            store.read_rows("images/cam", np.array([store.num_frames]))


def test_open_mode_a_creates_and_reopens(store_path: Path) -> None:
    with EpisodeStore.open(store_path, "a", schema=small_schema()) as store:
        store.append_episode(make_episode(0), make_meta(0))
    with EpisodeStore.open(store_path, "a", schema=small_schema()) as store:
        store.append_episode(make_episode(1), make_meta(1))
        assert len(store) == 2
    with EpisodeStore.open(store_path) as store:
        assert_store_matches(store, Expected())


def test_multi_episode_commit(store_path: Path) -> None:
    with EpisodeStore.create(store_path, small_schema()) as store:
        ids = store.append_episodes([(make_episode(k), make_meta(k)) for k in range(5)])
        assert ids == [0, 1, 2, 3, 4]
        assert store.commit.seq == 1
    with EpisodeStore.open(store_path) as store:
        assert_store_matches(store, Expected())


def test_store_is_plain_zarr(filled_store: Path) -> None:
    """Any zarr v3 reader sees the arrays at exactly the committed length."""
    group = zarr.open_group(filled_store, mode="r")
    assert group["obs/policy"].shape[0] == sum(len(make_episode(k)["reward"]) for k in range(10))
    assert "unilab_episode_store" in group.attrs
    assert np.isnan(group["obs/policy"].fill_value)
    assert group["origin"].fill_value == 255


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kind", ["missing", "file", "empty_dir", "plain_zarr"])
def test_not_a_store_names_path_and_expectation(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "thing"
    if kind == "file":
        path.write_text("hello")
    elif kind == "empty_dir":
        path.mkdir()
    elif kind == "plain_zarr":
        zarr.open_group(path, mode="w")
    with pytest.raises(NotAStoreError) as err:
        EpisodeStore.open(path, "r")
    assert str(path) in str(err.value)
    assert "expected an episode store" in str(err.value)
    with pytest.raises(NotAStoreError):
        validate(path)
    if kind in ("file", "plain_zarr"):
        with pytest.raises(EpisodeStoreError, match="refusing to replace"):
            EpisodeStore.create(path, small_schema(), overwrite=True)


def _assert_unchanged(path: Path, before: dict[str, str]) -> None:
    assert snapshot(path) == before
    with EpisodeStore.open(path) as store:
        assert len(store) == 10
        assert_store_matches(store, Expected())


@pytest.mark.parametrize(
    ("mutate", "error", "needles"),
    [
        (
            lambda f: f.__setitem__("obs/policy", np.zeros((len(f["reward"]), 6), np.float32)),
            SchemaMismatchError,
            ["'obs/policy'", "expected (n, 5) float32", "got shape", ", 6)"],
        ),
        (
            lambda f: f.__setitem__("images/cam", f["images/cam"].astype(np.float32)),
            SchemaMismatchError,
            ["'images/cam'", "uint8", "got dtype float32"],
        ),
        (
            lambda f: f.__setitem__("token", np.full(len(f["reward"]), 2**40)),
            SchemaMismatchError,
            ["'token'", "overflow int32"],
        ),
        (lambda f: f.pop("action"), SchemaMismatchError, ["missing", "'action'"]),
        (lambda f: f.__setitem__("obs/extra", f["reward"]), SchemaMismatchError, ["obs/extra"]),
        (
            lambda f: f.__setitem__("origin", "robot"),
            SchemaMismatchError,
            ["origin 'robot'", "sim", "human"],
        ),
        (
            lambda f: f.__setitem__("action", f["action"][:-1]),
            EpisodeLengthError,
            ["disagree", "action: ", "reward: "],
        ),
        (
            lambda f: f.__setitem__("terminated", np.ones(len(f["reward"]), bool)),
            SchemaMismatchError,
            ["terminated is set at frame 0", "last frame"],
        ),
    ],
)
def test_bad_episode_leaves_store_unchanged(
    filled_store: Path, mutate: object, error: type[Exception], needles: list[str]
) -> None:
    before = snapshot(filled_store)
    frames = episode_frames(10)
    mutate(frames)  # type: ignore[operator]
    with EpisodeStore.open(filled_store, "a") as store:
        commit = store.commit
        with pytest.raises(error) as err:
            store.append_episode(frames, make_meta(10))
        assert store.commit == commit
        for needle in needles:
            assert needle in str(err.value), (needle, str(err.value))
    _assert_unchanged(filled_store, before)


def test_bad_episode_in_batch_writes_nothing(filled_store: Path) -> None:
    before = snapshot(filled_store)
    bad = episode_frames(11)
    bad["reward"] = bad["reward"][:2]
    with EpisodeStore.open(filled_store, "a") as store, pytest.raises(EpisodeLengthError) as err:
        store.append_episodes([(make_episode(10), make_meta(10)), (bad, make_meta(11))])
    assert "episode 1 of 2" in str(err.value)
    _assert_unchanged(filled_store, before)


def test_empty_episode_and_bad_meta(filled_store: Path) -> None:
    before = snapshot(filled_store)
    empty = {n: a[:0] for n, a in make_episode(0).items()}
    with EpisodeStore.open(filled_store, "a") as store:
        with pytest.raises(EpisodeLengthError, match="at least one frame"):
            store.append_episode(empty, make_meta(0))
        with pytest.raises(SchemaMismatchError, match="unknown episode metadata keys"):
            store.append_episode(make_episode(10), {"taks": "typo"})
        with pytest.raises(SchemaMismatchError, match="JSON-serializable"):
            store.append_episode(make_episode(10), {"tags": {"x": object()}})
    _assert_unchanged(filled_store, before)


def test_schema_mismatch_on_open(filled_store: Path) -> None:
    before = snapshot(filled_store)
    other = StoreSchema({**SMALL_CHUNKS, "action": FieldSpec((4,), "float32")})
    with pytest.raises(SchemaMismatchError) as err:
        EpisodeStore.open(filled_store, "a", schema=other)
    assert "'action'" in str(err.value) and "(3,)" in str(err.value) and "(4,)" in str(err.value)
    _assert_unchanged(filled_store, before)


def test_schema_definition_errors() -> None:
    with pytest.raises(SchemaMismatchError, match="needs an 'action'"):
        StoreSchema({"obs/policy": FieldSpec((3,), "float32")})
    with pytest.raises(SchemaMismatchError, match="core column"):
        StoreSchema.build(obs={"p": 3}, action=2, extra={"reward": FieldSpec((2,), "float32")})
    with pytest.raises(SchemaMismatchError, match="not supported"):
        FieldSpec((3,), "complex64")
    with pytest.raises(SchemaMismatchError, match="not valid"):
        StoreSchema.build(obs={"Policy": 3}, action=2)
    with pytest.raises(SchemaMismatchError, match="must be uint8"):
        StoreSchema(
            {"images/cam": FieldSpec((4, 4, 3), "float32"), "action": FieldSpec((2,), "float32")}
        )


def test_single_writer_and_read_only(filled_store: Path) -> None:
    with EpisodeStore.open(filled_store, "a"):
        with pytest.raises(StoreLockedError, match="another process"):
            EpisodeStore.open(filled_store, "a")
        with EpisodeStore.open(filled_store, "r") as reader:  # readers are never blocked
            assert len(reader) == 10
            with pytest.raises(ReadOnlyStoreError, match="mode 'r'"):
                reader.append_episode(make_episode(10), make_meta(10))
    with pytest.raises(EpisodeStoreError, match="already an episode store"):
        EpisodeStore.create(filled_store, small_schema())


def test_reads_stop_at_commit(filled_store: Path) -> None:
    with EpisodeStore.open(filled_store) as store:
        with pytest.raises(IndexError, match="committed"):
            store.read("reward", 0, store.num_frames + 1)
        with pytest.raises(IndexError, match="10 committed episodes"):
            store.episode(10)
        with pytest.raises(KeyError, match="unknown field"):
            store.read("rewards")


def test_overwrite_replaces_store(filled_store: Path) -> None:
    with EpisodeStore.open(filled_store, "w", schema=small_schema()) as store:
        assert len(store) == 0
    doc = json.loads((filled_store / "zarr.json").read_text())
    assert doc["attributes"]["unilab_episode_store"]["commit"]["episodes"] == 0
    assert not list(filled_store.parent.glob(".*creating*"))
