"""FrameDataset (action chunks, n-step windows) and WeightedOriginSampler."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from store_helpers import episode_length, make_episode
from torch.utils.data import DataLoader

from unilab.data import EpisodeStore, SchemaMismatchError
from unilab.data.dataset import FrameDataset
from unilab.data.sampler import WeightedOriginSampler


def _frames(k: int) -> list[tuple[int, int]]:
    return [(k, j) for j in range(episode_length(k))]


def test_plain_frames_match_store(filled_store: Path) -> None:
    ds = FrameDataset(filled_store)
    flat = [fj for k in range(10) for fj in _frames(k)]
    assert len(ds) == len(flat)
    for item in (0, 5, len(ds) - 1):
        k, j = flat[item]
        sample = ds[item]
        assert sample["episode_index"].item() == k and sample["frame_index"].item() == j
        for name, arr in make_episode(k).items():
            np.testing.assert_array_equal(sample[name].numpy(), arr[j], err_msg=name)
    assert sample["images/cam"].dtype == torch.uint8
    assert sample["terminated"].dtype == torch.bool
    ds.close()


def test_action_chunks_pad_at_episode_end(filled_store: Path) -> None:
    horizon = 6
    ds = FrameDataset(filled_store, fields=["obs/policy", "action"], action_horizon=horizon)
    flat = [fj for k in range(10) for fj in _frames(k)]
    batch = ds.batch(np.arange(len(ds)))
    assert batch["action"].shape == (len(ds), horizon, 3)
    padded_items = 0
    for item, (k, j) in enumerate(flat):
        actions = make_episode(k)["action"]
        n = len(actions)
        steps = np.arange(j, j + horizon)
        want_pad = steps >= n
        want = actions[np.minimum(steps, n - 1)]  # past the end: repeat the last action
        np.testing.assert_array_equal(batch["action_is_pad"][item].numpy(), want_pad)
        np.testing.assert_array_equal(batch["action"][item].numpy(), want)
        padded_items += bool(want_pad.any())
        # Never an action from the next episode.
        from_this_episode = (-k - np.minimum(steps, n - 1) / 100).astype(np.float32)
        np.testing.assert_array_equal(batch["action"][item, :, 0].numpy(), from_this_episode)
    assert padded_items == sum(min(horizon - 1, episode_length(k)) for k in range(10))
    single = ds[3]
    assert single["action"].shape == (horizon, 3) and single["action_is_pad"].shape == (horizon,)


def test_n_step_windows_stay_in_episode(filled_store: Path) -> None:
    n, gamma = 3, 0.9
    ds = FrameDataset(filled_store, n_step=n, gamma=gamma)
    expected_items = []
    for k in range(10):
        ep = make_episode(k)
        length = len(ep["reward"])
        terminated = bool(ep["terminated"][-1])
        for j in range(length):
            if j == length - 1 and not terminated:
                continue  # no successor observation stored: not an item
            left = length - j if terminated else length - 1 - j
            steps = min(n, left)
            ret = sum(gamma**i * float(ep["reward"][j + i]) for i in range(steps))
            done = terminated and j + steps == length
            nxt = min(j + steps, length - 1)
            expected_items.append((k, j, ret, 0.0 if done else gamma**steps, done, steps, nxt))
    assert len(ds) == len(expected_items)
    batch = ds.batch(np.arange(len(ds)))
    for item, (k, j, ret, disc, done, steps, nxt) in enumerate(expected_items):
        assert batch["episode_index"][item] == k and batch["frame_index"][item] == j
        assert batch["nstep_reward"][item].item() == pytest.approx(ret, rel=1e-5)
        assert batch["nstep_discount"][item].item() == pytest.approx(disc, rel=1e-6)
        assert batch["nstep_done"][item].item() == done
        assert batch["nstep_k"][item].item() == steps
        nxt_obs = batch["next/obs/policy"][item].numpy()
        np.testing.assert_array_equal(nxt_obs, make_episode(k)["obs/policy"][nxt])
        assert int(nxt_obs[0]) // 1000 == k  # the next observation is from the same episode
        np.testing.assert_array_equal(
            batch["next/images/cam"][item].numpy(), make_episode(k)["images/cam"][nxt]
        )


def test_dataset_pickles_and_loads_in_dataloader(filled_store: Path) -> None:
    ds = FrameDataset(filled_store, fields=["images/cam", "action"], action_horizon=2)
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[7]["images/cam"].numpy(), ds[7]["images/cam"].numpy())
    loader = DataLoader(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0))
    batch = next(iter(loader))
    assert batch["images/cam"].shape == (8, 8, 6, 3)
    assert batch["action"].shape == (8, 2, 3)
    with pytest.raises(KeyError, match="unknown field"):
        FrameDataset(filled_store, fields=["obs/nope"])


def _store_with_origins(path: Path, counts: dict[str, int]) -> Path:
    from store_helpers import small_schema

    with EpisodeStore.create(path, small_schema()) as store:
        for origin, frames in counts.items():
            ep = {name: np.repeat(a[:1], frames, axis=0) for name, a in make_episode(1).items()}
            ep["terminated"] = np.zeros(frames, bool)
            ep["origin"] = origin
            store.append_episode(ep, {"fps": 10.0})
    return path


def test_weighted_origin_sampler_frequencies(store_path: Path) -> None:
    counts = {"sim": 2000, "human": 100, "wm": 400}
    ds = FrameDataset(_store_with_origins(store_path, counts), fields=["origin"])
    num = 40_000
    origin_of = ds.origins
    names = ["sim", "real", "human", "wm"]

    def fractions(sampler: WeightedOriginSampler) -> dict[str, float]:
        idx = np.fromiter(iter(sampler), dtype=np.int64, count=num)
        codes = origin_of[idx]
        return {names[c]: float((codes == c).mean()) for c in np.unique(codes)}

    share = WeightedOriginSampler(ds, {"sim": 1, "human": 2, "wm": 1}, num, seed=0)
    got = fractions(share)
    for name, want in {"sim": 0.25, "human": 0.5, "wm": 0.25}.items():
        assert got[name] == pytest.approx(want, abs=0.01), got
    # Uniform weights in per-frame mode reproduce the store's own proportions.
    per_frame = WeightedOriginSampler(
        ds, {"sim": 1, "human": 1, "wm": 1}, num, mode="per_frame", seed=0
    )
    got = fractions(per_frame)
    total = sum(counts.values())
    for name, c in counts.items():
        assert got[name] == pytest.approx(c / total, abs=0.01), got
    # Per-frame weight 10 on human frames: 100*10 / (2000 + 1000 + 400).
    boosted = fractions(
        WeightedOriginSampler(ds, {"sim": 1, "human": 10, "wm": 1}, num, mode="per_frame", seed=1)
    )
    assert boosted["human"] == pytest.approx(1000 / 3400, abs=0.01)
    # Unnamed origins are never drawn; a named origin without frames is renormalized away.
    only = WeightedOriginSampler(ds, {"human": 1, "real": 5}, num, seed=2)
    assert only.probabilities == {"human": 1.0}
    assert set(fractions(only)) == {"human"}
    # Within an origin every frame is reachable (uniform).
    human_items = np.flatnonzero(origin_of == 2)
    drawn = np.fromiter(iter(only), dtype=np.int64, count=num)
    assert set(np.unique(drawn)) == set(human_items)
    # Same seed, same draws.
    a = list(WeightedOriginSampler(ds, {"sim": 1}, 100, seed=5))
    assert a == list(WeightedOriginSampler(ds, {"sim": 1}, 100, seed=5))


def test_weighted_origin_sampler_errors(filled_store: Path) -> None:
    ds = FrameDataset(filled_store, fields=["origin"])
    with pytest.raises(SchemaMismatchError, match="unknown origin"):
        WeightedOriginSampler(ds, {"simulation": 1.0}, 10)
    with pytest.raises(ValueError, match=">= 0"):
        WeightedOriginSampler(ds, {"sim": -1.0}, 10)
    with pytest.raises(ValueError, match="no item has an origin with positive weight"):
        WeightedOriginSampler(ds, {"sim": 0.0}, 10)


def test_image_cache_gives_the_same_batches(filled_store: Path) -> None:
    fields = ["images/cam", "obs/policy", "action"]
    plain = FrameDataset(filled_store, fields=fields, action_horizon=3)
    cached = FrameDataset(filled_store, fields=fields, action_horizon=3, image_cache_bytes=2**30)
    assert not plain.images_cached and cached.images_cached
    rows = np.random.default_rng(0).integers(0, len(plain), size=17)
    a, b = plain.batch(rows), cached.batch(rows)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    plain.close(), cached.close()


def test_image_cache_stays_off_when_images_do_not_fit(filled_store: Path) -> None:
    one_frame = 8 * 6 * 3  # bytes of one uint8 8x6x3 image: far less than the whole store
    ds = FrameDataset(filled_store, fields=["images/cam", "action"], image_cache_bytes=one_frame)
    assert not ds.images_cached
    with pytest.raises(ValueError, match="image_cache_bytes must be >= 0"):
        FrameDataset(filled_store, image_cache_bytes=-1)
    ds.close()


def test_chunk_actions_after_a_perturbed_step_are_padding(tmp_path: Path) -> None:
    """Stores collected with perturbations (`unilab collect action_noise=...`): action j of
    a chunk from frame t is a label only while the executed actions t..t+j-1 were the
    recorded ones; the perturbed step's own action still is one."""
    from store_helpers import SMALL_CHUNKS

    from unilab.data import FieldSpec, StoreSchema

    schema = StoreSchema({**SMALL_CHUNKS, "perturbed": FieldSpec((), "bool")})
    ep = dict(make_episode(1))  # 10 frames
    n = len(ep["action"])
    perturbed = np.zeros(n, bool)
    perturbed[[3, 4, 8]] = True
    ep["perturbed"] = perturbed
    with EpisodeStore.create(tmp_path / "p.zarr", schema) as store:
        store.append_episode(ep, {"fps": 10.0})
    horizon = 4
    ds = FrameDataset(tmp_path / "p.zarr", fields=["action"], action_horizon=horizon)
    pad = ds.batch(np.arange(n))["action_is_pad"].numpy()
    for t in range(n):
        for j in range(horizon):
            past_end = t + j >= n
            after_perturbed = perturbed[t : t + j].any()
            assert pad[t, j] == (past_end or after_perturbed), (t, j)
    assert not pad[3, 0] and pad[3, 1]  # a perturbed frame keeps its own (clean) action
    assert not pad[5].any() and pad[6, 3]  # 5, 6, 7 clean, 8 perturbed: 9 is not a label
