"""bc_flow / bc_mse on real episode stores: FrameDataset -> learner end to end (loss falls,
held-out validation by episode, checkpoints load with weights_only), and on two-mode
demonstrations the flow policy produces both modes (token conditioning picks one) while the
MSE head averages them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.algos.bc_flow import BCFlow, BCFlowConfig
from unilab.algos.bc_mse import BCMSE, BCMSEConfig
from unilab.algos.offline import split_items, spread_items, train_offline
from unilab.algos.registry import ALGORITHMS
from unilab.bench.vla_toy import VOCABULARY, mode_fractions, write_toy_store
from unilab.data.dataset import FrameDataset
from unilab.policies.vla.config import VLAConfig

H = 4
SHAPES = {"policy": 4, "images/front": (16, 16, 3), "instruction": 6}


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_toy_store(tmp_path_factory.mktemp("toy") / "toy.zarr", episodes=40)


def tiny_model(**kw: object) -> VLAConfig:
    base: dict[str, object] = dict(
        horizon=H, num_steps=5, n_act=2, width=32, heads=2, prefix_layers=1, expert_layers=1,
        image_channels=[8, 16], image_tokens_side=2,
    )  # fmt: skip
    base.update(kw)
    return VLAConfig(**base)  # type: ignore[arg-type]


def test_registered_as_offline_algorithms() -> None:
    for name, cls in (("bc_flow", BCFlow), ("bc_mse", BCMSE)):
        entry = ALGORITHMS.get(name)
        assert entry.algo_cls is cls and entry.config_cls().name == name
        assert cls.offline and entry.off_policy


def test_store_to_learner_end_to_end_with_checkpoint_round_trip(
    toy_store: Path, tmp_path: Path
) -> None:
    ds = FrameDataset(toy_store, action_horizon=H)
    cfg = BCFlowConfig(
        model=tiny_model(), steps=60, batch_size=32, lr=2e-3, warmup_steps=5, val_every=30,
        vocab_size=len(VOCABULARY), ema_decay=0.9,
    )  # fmt: skip
    torch.manual_seed(0)
    learner = BCFlow(cfg, SHAPES, 2, torch.device("cpu"))
    before = train_offline(learner, ds, steps=0, seed=0).last_validation
    seen: list[int] = []
    result = train_offline(
        learner, ds, seed=0, log_every=20, on_metrics=lambda s, m: seen.append(s)
    )
    after = result.last_validation
    assert result.steps == 60 and seen[:2] == [20, 30]
    assert after["val_loss"] < 0.7 * before["val_loss"]
    assert after["val_action_mse"] < before["val_action_mse"]
    losses = [h["flow_loss"] for h in result.history if "flow_loss" in h]
    assert losses[-1] < losses[0]
    # The held-out frames are whole episodes that training never drew from.
    episodes = ds.episode_of[ds.indices]
    assert set(episodes[result.val_items]).isdisjoint(episodes[result.train_items])
    assert len(set(episodes[result.val_items])) == 4  # 10 % of 40 episodes
    # Normalizers were fitted from the data (inside the exported module).
    assert float(learner.actor.action_norm.mean[0].abs()) < 0.3  # modes ±0.8 balance out
    assert float(learner.actor.action_norm.std[0]) > 0.5

    path = tmp_path / "ckpt.pt"
    torch.save(learner.state_dict(), path)
    state = torch.load(path, weights_only=True)
    twin = BCFlow(cfg, SHAPES, 2, torch.device("cpu"))
    twin.load_state_dict(state)
    batch = ds.batch(np.arange(8))
    obs = learner.observations(batch, augment=False)
    noise = torch.randn(8, H, 2)
    torch.testing.assert_close(
        twin.actor.sample(obs, noise=noise)[0], learner.actor.sample(obs, noise=noise)[0]
    )
    # Resuming continues the same random stream and step count.
    m1, m2 = learner.update(ds.batch(np.arange(32))), twin.update(ds.batch(np.arange(32)))
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-6) and twin.step == 61
    ds.close()


def test_missing_fields_and_wrong_horizon_are_reported(toy_store: Path) -> None:
    cfg = BCMSEConfig(model=tiny_model(), vocab_size=len(VOCABULARY))
    learner = BCMSE(cfg, SHAPES, 2, torch.device("cpu"))
    no_images = FrameDataset(
        toy_store, action_horizon=H, fields=["obs/policy", "obs/instruction", "action"]
    )
    with pytest.raises(KeyError, match="no field\\(s\\) \\['images/front'\\]"):
        learner.update(no_images.batch(np.arange(4)))
    wrong = FrameDataset(toy_store, action_horizon=H + 1)
    with pytest.raises(ValueError, match="H=5; the model predicts H=4"):
        learner.update(wrong.batch(np.arange(4)))
    flat = FrameDataset(toy_store)
    with pytest.raises(KeyError, match="action_horizon=4"):
        learner.update(flat.batch(np.arange(4)))


def test_split_is_by_episode_and_deterministic() -> None:
    episodes = np.repeat(np.arange(20), 5)
    a_train, a_val = split_items(episodes, 0.2, seed=3)
    b_train, b_val = split_items(episodes, 0.2, seed=3)
    np.testing.assert_array_equal(a_val, b_val)
    np.testing.assert_array_equal(a_train, b_train)
    assert len(np.unique(episodes[a_val])) == 4 and a_train.size + a_val.size == 100
    assert split_items(np.zeros(10, int), 0.5, 0)[1].size == 0  # one episode: nothing held out
    with pytest.raises(ValueError, match="val_fraction"):
        split_items(episodes, 1.0, 0)
    # validation scores at most val_max_frames, spread over every held-out episode
    held = np.arange(1000, 2000)
    spread = spread_items(held, 100)
    assert spread.size == 100 and spread[0] == 1000 and spread[-1] == 1999
    assert np.all(np.diff(spread) > 0) and np.array_equal(spread_items(held, 5000), held)


def _first_frames_obs(learner, ds: FrameDataset, n: int) -> dict[str, torch.Tensor]:
    start = np.flatnonzero(ds.batch(np.arange(len(ds)))["frame_index"].numpy() == 0)
    return learner.observations(ds.batch(np.resize(start, n)), augment=False)


def test_flow_covers_both_modes_tokens_pick_one_and_mse_averages(toy_store: Path) -> None:
    fields = ["obs/policy", "obs/instruction", "token", "action"]
    ds = FrameDataset(toy_store, action_horizon=H, fields=fields)
    shapes = {"policy": 4, "instruction": 6}
    common = dict(steps=150, batch_size=256, lr=3e-3, warmup_steps=20, val_fraction=0.0,
                  vocab_size=len(VOCABULARY), ema_decay=0.95)  # fmt: skip
    torch.manual_seed(0)
    flow = BCFlow(
        BCFlowConfig(model=tiny_model(n_tokens=2, token_dropout=0.5), **common),  # type: ignore[arg-type]
        shapes, 2, torch.device("cpu"),
    )  # fmt: skip
    train_offline(flow, ds, seed=0)
    torch.manual_seed(0)
    mse = BCMSE(BCMSEConfig(model=tiny_model(), **common), shapes, 2, torch.device("cpu"))  # type: ignore[arg-type]
    train_offline(mse, ds, seed=0)

    obs = _first_frames_obs(flow, ds, 400)
    gen = torch.Generator().manual_seed(0)
    null_obs = {k: v for k, v in obs.items() if k != "token"}
    unconditioned = mode_fractions(
        flow.actor.sample(null_obs, generator=gen)[0][..., 0].mean(1).numpy()
    )
    assert unconditioned["left"] > 0.25 and unconditioned["right"] > 0.25, unconditioned
    for token, side in ((0, "left"), (1, "right")):
        cond = {**null_obs, "token": torch.full((400,), token)}
        frac = mode_fractions(flow.actor.sample(cond, generator=gen)[0][..., 0].mean(1).numpy())
        assert frac[side] > 0.9, (token, frac)

    mse_obs = {k: v for k, v in obs.items() if k != "token"}
    mean = mse.actor.sample(mse_obs, deterministic=True)[0][..., 0].mean(1).numpy()
    averaged = mode_fractions(mean)
    assert averaged["between"] > 0.9, averaged
    ds.close()


def test_state_head_learns_the_privileged_state_and_stays_out_of_the_action_path(
    tmp_path: Path,
) -> None:
    """algo.state_weight > 0: a head regresses the store's `obs/critic` from the prefix (an
    auxiliary loss that falls with training); actions do not depend on it, the actor built
    for play/eval has the same head so checkpoints load, and a store without the field is
    refused by name."""
    from unilab.algos.build import build_policy
    from unilab.bench.vla_toy import toy_episode, toy_schema
    from unilab.data import EpisodeStore, FieldSpec, StoreSchema

    rng = np.random.default_rng(0)
    base = toy_schema()
    schema = StoreSchema({**base.fields, "obs/critic": FieldSpec((2,), "float32")})
    with EpisodeStore.create(tmp_path / "s.zarr", schema) as store:
        for k in range(12):
            ep = toy_episode(rng, 16, 16, k % 2)
            phase = np.arange(16, dtype=np.float32) / 16  # where the bar is in the image
            ep["obs/critic"] = np.stack([phase, 1 - 2 * phase], axis=1)
            store.append_episode(ep, {"task": "toy_two_mode", "fps": 10.0})
    shapes = {**SHAPES, "critic": (2,)}
    cfg = BCFlowConfig(
        model=tiny_model(), steps=80, batch_size=32, lr=3e-3, warmup_steps=5, val_every=80,
        vocab_size=len(VOCABULARY), state_weight=1.0,
    )  # fmt: skip
    torch.manual_seed(0)
    learner = BCFlow(cfg, shapes, 2, torch.device("cpu"))
    assert learner.state_dim == 2 and learner.required_fields()["obs/critic"] == (2,)
    ds = FrameDataset(tmp_path / "s.zarr", action_horizon=H)
    result = train_offline(learner, ds, seed=0)
    state_losses = [h["state_loss"] for h in result.history if "state_loss" in h]
    assert state_losses[-1] < 0.3 * state_losses[0]
    # Acting never touches the head: the same actions with its weights scrambled.
    obs = learner.observations(ds.batch(np.arange(4)), augment=False)
    noise = torch.randn(4, H, 2)
    before = learner.actor.sample(obs, noise=noise)[0]
    assert learner.actor.state_head is not None
    with torch.no_grad():
        for p in learner.actor.state_head.parameters():
            p.add_(1.0)
    torch.testing.assert_close(learner.actor.sample(obs, noise=noise)[0], before)

    from types import SimpleNamespace

    task_shapes = SimpleNamespace(
        obs_shapes={
            "policy": (4,),
            "images/front": (16, 16, 3),
            "instruction": (6,),
            "critic": (2,),
        },
        obs_dims={"policy": 4, "critic": 2},
        action_dim=2,
    )
    actor = build_policy(cfg, task_shapes, learner.actor.state_dict())
    assert actor.state_head is not None  # the weights loaded strictly
    without = FrameDataset(tmp_path / "s.zarr", action_horizon=H, fields=list(base.names))
    with pytest.raises(KeyError, match="obs/critic"):
        learner.update(without.batch(np.arange(4)))
    plain = BCFlow(BCFlowConfig(model=tiny_model(), vocab_size=5), shapes, 2, torch.device("cpu"))
    assert plain.state_dim == 0 and plain.policy.state_head is None
