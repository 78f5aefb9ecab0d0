"""awr_flow on a small real store with known answers: per-task baseline advantages,
demonstration / intervention frames pinned, frames drawn at exp(A / beta) within a source
and per-source shares stepped per iteration, the RECAP indicator in the policy's input
during training, and inference that feeds advantage = 1 (guidance at s = 1 equals the
conditional policy; the export metadata says what deploy feeds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.algos import advantages as adv
from unilab.algos.awr_flow import AWRFlow, AWRFlowConfig
from unilab.algos.frame_advantages import (
    ORIGIN_NAMES,
    SOURCES,
    FrameTable,
    baseline_groups,
    compute_advantages,
)
from unilab.algos.offline import train_offline
from unilab.algos.registry import ALGORITHMS
from unilab.config import compose
from unilab.data import EpisodeStore, StoreSchema
from unilab.data.dataset import FrameDataset
from unilab.data.schema import ORIGINS
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.policy import VLAPolicy

H = 4
L = 10  # frames per episode
SHAPES = {"policy": 3}
SIM, HUMAN = ORIGINS.index("sim"), ORIGINS.index("human")

# (task, success, origin, policy_version, intervention frames)
EPISODES = [
    ("a", True, SIM, 0, ()),
    ("a", True, SIM, 0, ()),
    ("a", False, SIM, 0, ()),
    ("a", False, SIM, 0, (4, 5, 6)),  # a takeover inside a failed rollout
    ("a", True, SIM, -1, ()),  # scripted expert demonstrations (`unilab collect`)
    ("a", True, SIM, -1, ()),
    ("b", True, SIM, 3, ()),
    ("b", False, SIM, 3, ()),
    ("b", False, SIM, 3, ()),
    ("b", True, HUMAN, -1, ()),  # a teleoperated demonstration
]


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_store(tmp_path_factory.mktemp("awr") / "mixed.zarr")


def write_store(path: Path, shows_outcome: bool = True) -> Path:
    """EPISODES as a store; the observations show each episode's outcome unless told not."""
    rng = np.random.default_rng(0)
    schema = StoreSchema.build(obs={"policy": 3}, action=2)
    episodes = []
    for k, (task, success, origin, version, takeover) in enumerate(EPISODES):
        phase = np.arange(L) / L
        last = np.arange(L) == L - 1
        frames = {
            "obs/policy": np.stack(
                [phase, np.full(L, float(success and shows_outcome)), rng.normal(0, 0.1, L)],
                axis=1,
            ).astype(np.float32),
            "action": rng.normal(0, 1, (L, 2)).astype(np.float32),
            "reward": (last * (1.0 if success else 0.0)).astype(np.float32),
            "terminated": last,
            "truncated": np.zeros(L, bool),
            "origin": np.full(L, origin, np.uint8),
            "policy_version": np.full(L, version, np.int64),
            "is_intervention": np.isin(np.arange(L), takeover),
        }
        episodes.append((frames, {"task": task, "success": success, "fps": 10.0, "seed": k}))
    with EpisodeStore.create(path, schema, overwrite=True) as st:
        st.append_episodes(episodes)
    return path


def tiny_model(**kw: object) -> VLAConfig:
    base: dict[str, object] = dict(
        horizon=H, num_steps=3, n_act=2, width=32, heads=2, prefix_layers=1, expert_layers=1,
    )  # fmt: skip
    base.update(kw)
    return VLAConfig(**base)  # type: ignore[arg-type]


def awr_config(**kw: object) -> AWRFlowConfig:
    cfg = AWRFlowConfig(model=tiny_model(), value_weight=0.0, val_fraction=0.0, batch_size=16)
    for k, v in kw.items():
        setattr(cfg, k, v)
    assert cfg.adopt_task(()) == [] and cfg.problems() == []
    return cfg


def expected_advantages(clip: float = 2.0, demo: float = 1.0) -> np.ndarray:
    """The module's formula written out for EPISODES."""
    returns = np.array([float(s) for _, s, *_ in EPISODES])
    tasks = np.array([t for t, *_ in EPISODES])
    per_episode = np.array(
        [r - returns[tasks == t].mean() for r, t in zip(returns, tasks, strict=True)]
    )
    out = np.repeat(np.clip(per_episode, -clip, clip), L)
    for k, (_, _, origin, version, takeover) in enumerate(EPISODES):
        if origin == HUMAN or (origin == SIM and version < 0):
            out[k * L : (k + 1) * L] = demo
        for t in takeover:
            out[k * L + t] = demo
    return out


def prepared(store: Path, cfg: AWRFlowConfig) -> tuple[AWRFlow, FrameDataset]:
    ds = FrameDataset(store, action_horizon=H)
    torch.manual_seed(0)
    learner = AWRFlow(cfg, SHAPES, 2, torch.device("cpu"))
    learner.prepare_frames(ds, np.arange(len(ds)), seed=0)
    return learner, ds


def test_registered_and_composed_with_recap_switches() -> None:
    entry = ALGORITHMS.get("awr_flow")
    assert entry.algo_cls is AWRFlow and AWRFlow.offline
    cfg = compose(["task=arm_move_side", "algo=awr_flow"]).algo
    assert cfg.model.advantage and cfg.model.advantage_dropout == 0.0
    assert cfg.model.inference_advantage == 1 and cfg.advantage_field == "advantage"
    # the store's origin names, which this layer may not import, agree with the data layer's
    assert ORIGIN_NAMES == ORIGINS and set(SOURCES) == {"expert", *ORIGINS}


def test_advantages_known_answers_flow_into_the_sampler(store: Path) -> None:
    beta = 0.5
    learner, ds = prepared(store, awr_config(beta=beta))
    a = learner.frame_advantages
    assert a is not None
    want = expected_advantages()
    np.testing.assert_allclose(a, want, atol=1e-12)
    # task a: mean success 4/6 -> successes +1/3, failures -2/3; task b: 2/4 -> +1/2, -1/2
    assert a[0] == pytest.approx(1 / 3) and a[2 * L] == pytest.approx(-2 / 3)
    assert a[6 * L] == pytest.approx(0.5) and a[7 * L] == pytest.approx(-0.5)
    assert a[3 * L + 4] == 1.0 and a[3 * L + 3] == pytest.approx(-2 / 3)  # takeover frames

    sampler = learner.sampler
    assert sampler is not None and sampler.names == ("expert", "sim", "human")
    # shares 1 / 1 / 1 renormalised; frame probabilities share x exp(A/beta) / Z per source;
    # the takeover frames (episode 3, frames 4-6) are the human source's, not the rollouts'
    takeover = [3 * L + 4, 3 * L + 5, 3 * L + 6]
    source = {"expert": list(range(4 * L, 6 * L)), "human": [*takeover, *range(9 * L, 10 * L)]}
    sim = np.setdiff1d(np.r_[0 : 4 * L, 6 * L : 9 * L], takeover)
    p = np.zeros(len(ds))
    for frames in source.values():
        p[frames] = 1 / 3 / len(frames)
    w = np.exp(want[sim] / beta)
    p[sim] = w / w.sum() / 3
    n = 200_000
    drawn = learner.draw_items(np.arange(len(ds)), n, seed=1, step=0)
    counts = np.bincount(drawn, minlength=len(ds))
    sigma = np.sqrt(n * p * (1 - p))
    assert np.all(np.abs(counts - n * p) <= 5 * sigma + 1)
    # frames of the better episodes are drawn more, at the rate the formula gives
    good, bad = counts[0:L].sum(), counts[2 * L : 3 * L].sum()
    assert good / bad == pytest.approx(np.exp((1 / 3 + 2 / 3) / beta), rel=0.05)
    # the batch of a step depends on (seed, step) only
    np.testing.assert_array_equal(
        learner.draw_items(np.arange(len(ds)), 64, 3, 7),
        learner.draw_items(np.arange(len(ds)), 64, 3, 7),
    )
    ds.close()


def test_shares_decay_per_iteration_toward_floors(store: Path) -> None:
    floors = {"expert": 0.05, "human": 0.05, "sim": 0.6}
    shares = {"expert": 2.0, "human": 1.0, "sim": 1.0}
    learner, ds = prepared(
        store, awr_config(iteration=2, share_decay=0.5, shares=shares, floors=floors)
    )
    s = {"expert": 0.5, "human": 0.25, "sim": 0.25}
    f = {"expert": 0.05, "human": 0.05, "sim": 0.25}  # sim's floor capped at its share
    for _ in range(2):
        moved = {k: f[k] + 0.5 * (s[k] - f[k]) for k in s}
        s = {k: v / sum(moved.values()) for k, v in moved.items()}
    assert learner.sampler is not None
    for k, v in learner.sampler.shares.items():
        assert v == pytest.approx(s[k])
    assert learner.stats["share_expert"] == pytest.approx(s["expert"])
    with pytest.raises(ValueError, match=r"no entry for source\(s\) \['human'\]"):
        prepared(store, awr_config(shares={"expert": 1.0, "sim": 1.0}))
    ds.close()


def test_gae_blend_uses_the_policys_predictions(store: Path) -> None:
    ds = FrameDataset(store, action_horizon=H)
    table = FrameTable.from_frames(ds)
    cfg = awr_config(lam=0.0)
    values = np.full(table.num_frames, 0.5)
    mixed = compute_advantages(table, cfg, values, gae_weight=1.0)
    # lam = 0: TD errors; V = 0.5 everywhere, reward 1 where a success ends, 0 after the end
    assert mixed[0] == pytest.approx(0.0) and mixed[L - 1] == pytest.approx(0.5)
    assert mixed[3 * L - 1] == pytest.approx(-0.5)  # failed and terminated
    assert mixed[3 * L + 4] == 1.0  # the takeover is still pinned
    half = compute_advantages(table, cfg, values, gae_weight=0.5)
    early = compute_advantages(table, cfg, None)
    assert half[L - 1] == pytest.approx(0.5 * early[L - 1] + 0.25)
    ds.close()


def random_sim_frames(rng: np.random.Generator, version: int) -> dict[str, np.ndarray]:
    """One episode of L random `sim` frames by policy `version`, terminated at its end."""
    return {
        "obs/policy": rng.normal(0, 1, (L, 3)).astype(np.float32),
        "action": rng.normal(0, 1, (L, 2)).astype(np.float32),
        "reward": np.zeros(L, np.float32),
        "terminated": np.arange(L) == L - 1,
        "truncated": np.zeros(L, bool),
        "origin": np.full(L, SIM, np.uint8),
        "policy_version": np.full(L, version, np.int64),
    }


def test_a_takeover_that_failed_anyway_is_no_demonstration(tmp_path: Path) -> None:
    # two takeovers recorded as `unilab play --takeover-after` records them (the episode a
    # policy failure, the task's outcome in the tags): one rescued, one that failed anyway
    path = tmp_path / "rescues.zarr"
    schema = StoreSchema.build(obs={"policy": 3}, action=2)
    rng = np.random.default_rng(0)
    episodes = []
    for k, rescued in enumerate((True, False, None)):
        frames = {**random_sim_frames(rng, 1), "is_intervention": np.arange(L) >= 5}
        tags = {} if rescued is None else {"intervened": True, "task_success": rescued}
        meta = {"task": "a", "success": False, "fps": 10.0, "seed": k, "tags": tags}
        episodes.append((frames, meta))
    with EpisodeStore.create(path, schema, overwrite=True) as st:
        st.append_episodes(episodes)
    ds = FrameDataset(path, action_horizon=H)
    assert ds.episode_failed_rescue == [False, True, False]
    a = compute_advantages(FrameTable.from_frames(ds), awr_config(), None)
    # every episode failed (the policy's outcome): baseline advantage 0 for all frames ...
    np.testing.assert_allclose(a[[0, 4, L, L + 4, 2 * L, 2 * L + 4]], 0.0)
    # ... the rescue's intervention frames are pinned as a demonstration, the failed one's
    # are not; a takeover with no recorded outcome (a station's) is trusted
    np.testing.assert_allclose(a[5:L], 1.0)
    np.testing.assert_allclose(a[L + 5 : 2 * L], 0.0)
    np.testing.assert_allclose(a[2 * L + 5 : 3 * L], 1.0)
    ds.close()


def test_recap_indicator_reaches_the_policy_input_during_training(store: Path) -> None:
    learner, ds = prepared(store, awr_config())
    seen: list[torch.Tensor] = []
    original = learner.observations

    def spy(batch, augment):  # type: ignore[no-untyped-def]
        obs = original(batch, augment)
        seen.append(obs["advantage"].clone())
        return obs

    learner.observations = spy  # type: ignore[method-assign]
    items = np.arange(len(ds))
    batch = ds.batch(items)
    a = learner.batch_advantages(batch)
    np.testing.assert_allclose(a, expected_advantages())
    step = learner.step
    metrics = learner.update(batch)
    fed = seen[-1].numpy()
    np.testing.assert_array_equal(fed, learner.recap_indicator(a, step))
    kept = fed != adv.NULL
    np.testing.assert_array_equal(fed[kept], np.where(a[kept] > 0, 1, 0))
    assert 0 < (~kept).mean() < 0.6 and set(np.unique(fed)) == {-1, 0, 1}
    assert metrics["adv_positive"] == pytest.approx((expected_advantages() > 0).mean())
    # the indicator enters the network: its embedding rows learn (zero-initialised)
    for _ in range(3):
        learner.update(batch)
    emb = learner.policy.prefix.advantage
    assert emb is not None
    assert bool((emb.prefix_embed.weight.detach().abs().sum(-1) > 0).all())

    # the offline loop calls prepare_frames and draws through the sampler
    fresh = AWRFlow(awr_config(steps=3), SHAPES, 2, torch.device("cpu"))
    result = train_offline(fresh, ds, seed=0, log_every=1, prefetch=0)
    assert fresh.sampler is not None and result.steps == 3
    assert all("adv_mean" in h for h in result.history)
    ds.close()


def _policy(guidance: float | None) -> VLAPolicy:
    torch.manual_seed(0)
    cfg = tiny_model(advantage=True, inference_advantage=1, guidance_scale=guidance)
    policy = VLAPolicy(VLAInputs(proprio_dim=3, action_dim=2), cfg).eval()
    assert policy.prefix.advantage is not None
    with torch.no_grad():  # trained-looking: no zero-initialised gates, the rows differ
        for p in policy.parameters():
            p.normal_(0, 0.3)
    return policy


def test_inference_feeds_advantage_one_and_guidance_at_one_is_conditional(
    tmp_path: Path,
) -> None:
    from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy
    from unilab.export.vla_onnx import export_vla_onnx, vla_metadata

    policy = _policy(None)
    obs = {"policy": torch.randn(5, 3)}
    noise = torch.randn(5, H, 2)
    given = {**obs, "advantage": torch.ones(5, dtype=torch.int64)}
    nulled = {**obs, "advantage": torch.full((5,), -1, dtype=torch.int64)}
    plain = policy.sample(obs, noise=noise)[0]
    torch.testing.assert_close(plain, policy.sample(given, noise=noise)[0])
    assert not torch.allclose(plain, policy.sample(nulled, noise=noise)[0], atol=1e-4)
    # the executor used by play / eval / rollouts takes the same path
    chunk = policy.planner()({"policy": obs["policy"].numpy()}, noise.numpy())
    np.testing.assert_allclose(chunk, plain.numpy(), atol=1e-6)

    guided = _policy(1.0)
    guided.load_state_dict(policy.state_dict())
    torch.testing.assert_close(guided.sample(obs, noise=noise)[0], plain, atol=1e-5, rtol=1e-5)
    stronger = _policy(3.0)
    stronger.load_state_dict(policy.state_dict())
    assert not torch.allclose(stronger.sample(obs, noise=noise)[0], plain, atol=1e-4)

    # export: the metadata says what deploy feeds, and the onnxruntime runner feeds it
    assert vla_metadata(policy).inference_advantage == 1
    path = export_vla_onnx(policy, tmp_path / "vla.onnx")
    runner = OnnxVLAPolicy(path)
    assert runner.metadata.inference_advantage == 1
    out = runner.plan({"policy": obs["policy"].numpy()}, noise.numpy())
    np.testing.assert_allclose(out, plain.numpy(), atol=1e-4)
    nulled_out = runner.plan(
        {"policy": obs["policy"].numpy(), "advantage": np.full(5, -1)}, noise.numpy()
    )
    assert not np.allclose(nulled_out, out, atol=1e-3)


def test_repeated_scenes_are_judged_against_their_own_tries(tmp_path: Path) -> None:
    # Scene s1 tried 3 times (1 success), s2 twice (both succeed), s3 once, one untagged
    # rollout and one demonstration: the tries of a repeated scene are judged against its
    # mean; a scene seen once and an untagged episode fall back to the task's mean.
    rows = [  # (scene, success, policy_version)
        ("s1", True, 0), ("s1", False, 0), ("s1", False, 0),
        ("s2", True, 0), ("s2", True, 0),
        ("s3", False, 0),
        (None, True, 0),
        (None, True, -1),  # a scripted expert demonstration
    ]  # fmt: skip
    path = tmp_path / "scenes.zarr"
    rng = np.random.default_rng(0)
    episodes = []
    for k, (scene, success, version) in enumerate(rows):
        frames = random_sim_frames(rng, version)
        tags = {} if scene is None else {"scene": scene}
        meta = {"task": "a", "success": success, "fps": 10.0, "seed": k, "tags": tags}
        episodes.append((frames, meta))
    with EpisodeStore.create(path, schema=StoreSchema.build(obs={"policy": 3}, action=2)) as st:
        st.append_episodes(episodes)
    ds = FrameDataset(path, action_horizon=H)
    assert ds.episode_scenes == ["s1", "s1", "s1", "s2", "s2", "s3", None, None]
    table = FrameTable.from_frames(ds)
    groups = baseline_groups(table.tasks, table.scenes)
    assert groups[:3] == [groups[0]] * 3 and groups[3] == groups[4] != groups[0]
    assert groups[5] == groups[6] == groups[7] == "task:a"
    a = compute_advantages(table, awr_config(), None)[::L]  # one value per episode
    task_mean = np.mean([0.0, 1.0, 1.0])  # s3, the untagged rollout, the demo
    want: list[float] = [2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, -task_mean, 1 - task_mean, 1.0]
    np.testing.assert_allclose(a, want, atol=1e-12)
    # the same scene name under another task is another group
    assert baseline_groups(["a", "b"], ["s1", "s1"]) == ["task:a", "task:b"]
    with pytest.raises(ValueError, match="2 episode tasks but 1 episode scenes"):
        baseline_groups(["a", "a"], ["s1"])
    ds.close()


def test_value_heads_learn_outcome_rates_from_a_uniform_batch_not_the_weighted_one(
    tmp_path: Path,
) -> None:
    """At a small beta the advantage-weighted batch holds nearly only successes. The value
    heads train on a uniform batch of their own, so where the observations do not show the
    outcome, P(success) learns the store's success rate, not the weighted batch's."""
    store = write_store(tmp_path / "blind.zarr", shows_outcome=False)
    success = np.repeat([float(s) for _, s, *_ in EPISODES], L)

    def trained(value_batch_size: int) -> tuple[AWRFlow, float, float]:
        cfg = awr_config(beta=0.05, value_weight=1.0, lr=3e-3, warmup_steps=0)
        cfg.value_batch_size = value_batch_size
        ds = FrameDataset(store, action_horizon=H, outcome_targets=True)
        torch.manual_seed(0)
        learner = AWRFlow(cfg, SHAPES, 2, torch.device("cpu"))
        items = np.arange(len(ds))
        learner.prepare_frames(ds, items, seed=0)
        drawn = np.concatenate([learner.draw_items(items, 16, 0, s) for s in range(50)])
        for step in range(120):
            learner.update(ds.batch(learner.draw_items(items, 16, 0, step)))
        values = learner.predict_frame_values(ds)
        ds.close()
        return learner, float(values.mean()), float(success[drawn].mean())

    learner, uniform_mean, drawn_rate = trained(64)
    assert drawn_rate > 0.9  # what the weighted batch shows the heads
    batch = learner.value_batch(7)
    assert batch is not None and batch["advantage"].eq(adv.NULL).all()
    again = learner.value_batch(7)
    assert again is not None and torch.equal(batch["frame_index"], again["frame_index"])
    _, weighted_mean, _ = trained(0)
    assert abs(uniform_mean - success.mean()) < 0.1  # the store's rate, 0.6
    assert weighted_mean > 0.85  # trained on the weighted batch: biased toward success
