"""bc_flow with value heads (algo.value_weight > 0) on a real store of successful and
failed episodes: the config asks the dataset for outcome targets, updates report the head
losses, held-out validation reports the Brier score and progress error, the time scale is
fitted from the data, and a batch without targets is refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.algos.bc_flow import BCFlow, BCFlowConfig
from unilab.algos.offline import train_offline
from unilab.data import EpisodeStore, StoreSchema
from unilab.data.dataset import FrameDataset
from unilab.policies.vla.config import VLAConfig

H, LENGTH, FPS = 2, 8, 10.0


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def outcome_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 episodes; the odd ones fail. The second proprioception coordinate shows which."""
    path = tmp_path_factory.mktemp("outcomes") / "store.zarr"
    rng = np.random.default_rng(0)
    episodes = []
    for k in range(20):
        ok = k % 2 == 0
        phase = np.arange(LENGTH) / LENGTH
        proprio = np.stack(
            [phase, np.full(LENGTH, 1.0 if ok else -1.0), rng.normal(0, 0.1, LENGTH)], axis=1
        )
        frames = {
            "obs/policy": proprio.astype(np.float32),
            "action": rng.normal(0, 1, (LENGTH, 2)).astype(np.float32),
            "reward": np.zeros(LENGTH, np.float32),
            "terminated": np.arange(LENGTH) == LENGTH - 1,
            "truncated": np.zeros(LENGTH, bool),
            "origin": np.zeros(LENGTH, np.uint8),
        }
        episodes.append((frames, {"success": ok, "fps": FPS}))
    with EpisodeStore.create(path, StoreSchema.build(obs={"policy": 3}, action=2)) as store:
        store.append_episodes(episodes)
    return path


def config(**kw: object) -> BCFlowConfig:
    model = VLAConfig(
        horizon=H, num_steps=2, n_act=1, width=32, heads=2, prefix_layers=1, expert_layers=1
    )
    base: dict[str, object] = dict(
        model=model, steps=40, batch_size=32, lr=3e-3, warmup_steps=5, val_every=20,
        val_fraction=0.2, value_weight=0.5, ema_decay=0.5,
    )  # fmt: skip
    base.update(kw)
    return BCFlowConfig(**base)  # type: ignore[arg-type]


def test_value_weight_trains_and_validates_the_heads(outcome_store: Path) -> None:
    cfg = config()
    options = BCFlow.frame_options(cfg)
    assert options == {"action_horizon": H, "outcome_targets": True}
    ds = FrameDataset(outcome_store, **options)
    torch.manual_seed(0)
    learner = BCFlow(cfg, {"policy": 3}, 2, torch.device("cpu"))
    assert learner.policy.value_heads is not None and not cfg.model.value_heads
    assert BCFlow.build_actor(cfg, {"policy": 3}, 2).value_heads is not None  # checkpoints
    assert {"target/success", "target/has_progress"} <= set(learner.required_fields())
    before = train_offline(learner, ds, steps=0, seed=0).last_validation
    result = train_offline(learner, ds, seed=0, log_every=10)
    logged = [h for h in result.history if "success_loss" in h]
    assert logged and {"progress_loss", "ttg_loss", "flow_loss"} <= set(logged[-1])
    after = result.last_validation
    for key in ("val_success_brier", "val_success_rate", "val_progress_mae", "val_ttg_mae"):
        assert key in after and np.isfinite(after[key]), key
    # Outcomes are visible in the state: 40 steps beat the constant predictor clearly.
    rate = after["val_success_rate"]
    assert after["val_success_brier"] < 0.5 * rate * (1 - rate)
    assert after["val_success_brier"] < before["val_success_brier"]
    # Time scale: the mean time to go of successful frames, (7 + 6 + ... + 0) / 8 / fps.
    heads = learner.actor.value_heads
    assert heads is not None and float(heads.time_scale) == pytest.approx(3.5 / FPS, rel=1e-5)
    ds.close()


def test_off_by_default_and_missing_targets_named(outcome_store: Path) -> None:
    plain = config(value_weight=0.0)
    assert BCFlow.frame_options(plain) == {"action_horizon": H}
    learner = BCFlow(plain, {"policy": 3}, 2, torch.device("cpu"))
    assert learner.policy.value_heads is None
    assert "success_loss" not in learner.update(
        FrameDataset(outcome_store, action_horizon=H).batch(np.arange(8))
    )
    heads = BCFlow(config(), {"policy": 3}, 2, torch.device("cpu"))
    no_targets = FrameDataset(outcome_store, action_horizon=H)
    with pytest.raises(KeyError, match=r"value_weight=0\.5 > 0.*outcome_targets=True"):
        heads.update(no_targets.batch(np.arange(8)))


def test_success_head_is_platt_scaled_on_held_out_episodes(outcome_store: Path) -> None:
    """After training, P(success) is calibrated on the held-out episodes: (scale, bias)
    stored in the heads, the in-sample Brier no worse than the raw one, predictions
    changed while the raw logit is not; a checkpoint carries it, and a state dict written
    before calibration existed loads as the identity."""
    cfg = config(val_fraction=0.4)
    ds = FrameDataset(outcome_store, **BCFlow.frame_options(cfg))
    torch.manual_seed(0)
    learner = BCFlow(cfg, {"policy": 3}, 2, torch.device("cpu"))
    result = train_offline(learner, ds, seed=0, log_every=10)
    fitted = result.history[-1]
    assert {"val_success_scale", "val_success_bias", "val_calibration_frames"} <= set(fitted)
    assert fitted["val_calibration_frames"] == result.val_items.size  # all, under the cap
    assert fitted["val_success_brier_calibrated"] <= fitted["val_success_brier_raw"] + 1e-12
    heads = learner.actor.value_heads
    assert heads is not None
    assert float(heads.success_scale) == pytest.approx(fitted["val_success_scale"], rel=1e-6)
    assert float(heads.success_scale) != 1.0 and float(heads.success_bias) != 0.0
    obs = {"policy": ds.batch(np.arange(16))["obs/policy"]}
    pred = learner.actor.predict_values(obs)
    expected = torch.sigmoid(heads.success_scale * pred["success_logit"] + heads.success_bias)
    assert torch.allclose(pred["success"], expected)
    reloaded = BCFlow(cfg, {"policy": 3}, 2, torch.device("cpu"))
    reloaded.load_state_dict(learner.state_dict())
    assert torch.equal(reloaded.actor.predict_values(obs)["success"], pred["success"])
    calibration = ("value_heads.success_scale", "value_heads.success_bias")
    assert set(calibration) <= set(learner.actor.state_dict())
    old = {k: v for k, v in learner.actor.state_dict().items() if k not in calibration}
    legacy = BCFlow.build_actor(cfg, {"policy": 3}, 2)
    legacy.load_state_dict(old)
    raw = legacy.predict_values(obs)
    assert torch.allclose(raw["success"], torch.sigmoid(raw["success_logit"]))
    ds.close()


def test_calibration_off_or_one_outcome(outcome_store: Path) -> None:
    ds = FrameDataset(outcome_store, **BCFlow.frame_options(config()))
    off = BCFlow(config(calibrate_success=False, steps=5), {"policy": 3}, 2, torch.device("cpu"))
    history = train_offline(off, ds, seed=0).history
    assert not any("val_success_scale" in h for h in history)
    assert off.actor.value_heads is not None and float(off.actor.value_heads.success_scale) == 1.0
    learner = BCFlow(config(steps=5), {"policy": 3}, 2, torch.device("cpu"))
    successes = np.flatnonzero(ds.batch(np.arange(len(ds)))["target/success"].numpy() > 0.5)
    with pytest.raises(ValueError, match="both outcomes"):
        learner.calibrate_values(ds, successes)
    ds.close()
