"""Advantages for offline improvement: the per-task baseline, GAE over the policy's own value
predictions (worked by hand below), blending and clipping, the fixed advantage of demos and
takeovers, and the RECAP indicator's masking probabilities (exact and drawn)."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.algos.advantages import (
    NEGATIVE,
    NULL,
    POSITIVE,
    apply_demo_advantage,
    blend,
    clip_advantages,
    demo_frames,
    episode_baseline_advantages,
    expand_to_frames,
    gae_from_predictions,
    recap_indicator,
    recap_null_probability,
)
from unilab.algos.frame_advantages import SOURCES, frame_sources
from unilab.data.schema import ORIGINS

# A 3-frame episode: predicted progress 0.2, 0.5, 0.9; rewards (progress increments of the
# steps t -> t+1, the last one a final bonus) 0.3, 0.4, 0.1; gamma 0.9, lam 0.5 (gamma lam 0.45).
VALUES = [0.2, 0.5, 0.9]
REWARDS = [0.3, 0.4, 0.1]


def test_gae_terminated_episode_by_hand() -> None:
    # Terminated: V after the last frame is 0.
    # delta_0 = 0.3 + 0.9*0.5 - 0.2 = 0.55
    # delta_1 = 0.4 + 0.9*0.9 - 0.5 = 0.71
    # delta_2 = 0.1 + 0.9*0.0 - 0.9 = -0.80
    # A_2 = -0.80;  A_1 = 0.71 + 0.45*(-0.80) = 0.35;  A_0 = 0.55 + 0.45*0.35 = 0.7075
    adv = gae_from_predictions(VALUES, REWARDS, terminal=True, gamma=0.9, lam=0.5)
    np.testing.assert_allclose(adv, [0.7075, 0.35, -0.80], atol=1e-12)


def test_gae_truncated_episode_bootstraps_last_value() -> None:
    # Truncated: V after the last frame is the last prediction, 0.9.
    # delta_2 = 0.1 + 0.9*0.9 - 0.9 = 0.01;  A_2 = 0.01
    # A_1 = 0.71 + 0.45*0.01 = 0.7145;  A_0 = 0.55 + 0.45*0.7145 = 0.871525
    adv = gae_from_predictions(VALUES, REWARDS, terminal=False, gamma=0.9, lam=0.5)
    np.testing.assert_allclose(adv, [0.871525, 0.7145, 0.01], atol=1e-12)
    # An explicit bootstrap value replaces the last prediction: delta_2 = 0.1 + 0.9*0.5 - 0.9.
    explicit = gae_from_predictions(
        VALUES, REWARDS, terminal=False, gamma=0.9, lam=0.5, bootstrap_value=0.5
    )
    assert explicit[2] == pytest.approx(-0.35)


def test_gae_with_lambda_one_is_return_minus_value() -> None:
    # gamma = lam = 1, terminated: A_t = (sum of rewards from t) - V_t.
    adv = gae_from_predictions(VALUES, REWARDS, terminal=True, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv, [0.8 - 0.2, 0.5 - 0.5, 0.1 - 0.9], atol=1e-12)
    # lam = 0: one-step TD errors.
    td = gae_from_predictions(VALUES, REWARDS, terminal=True, gamma=0.9, lam=0.0)
    np.testing.assert_allclose(td, [0.55, 0.71, -0.80], atol=1e-12)


def test_gae_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match="3 values but 2 rewards"):
        gae_from_predictions(VALUES, REWARDS[:2], terminal=True)
    with pytest.raises(ValueError, match=r"values\[1\] is nan"):
        gae_from_predictions([0.1, np.nan, 0.2], REWARDS, terminal=True)
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], got 1.5"):
        gae_from_predictions(VALUES, REWARDS, terminal=True, gamma=1.5)
    assert gae_from_predictions([], [], terminal=True).shape == (0,)


def test_episode_baseline_is_per_task() -> None:
    # task a: returns 1, 0, 1 (mean 2/3); task b: returns 3, 5 (mean 4); c alone gets 0.
    returns = [1.0, 0.0, 3.0, 1.0, 5.0, 7.0]
    tasks = ["a", "a", "b", "a", "b", "c"]
    adv = episode_baseline_advantages(returns, tasks)
    np.testing.assert_allclose(adv, [1 / 3, -2 / 3, -1.0, 1 / 3, 1.0, 0.0], atol=1e-12)
    # Integer task ids work the same.
    np.testing.assert_allclose(episode_baseline_advantages(returns, [0, 0, 1, 0, 1, 2]), adv)
    frames = expand_to_frames(adv[:3], [2, 0, 1])
    np.testing.assert_allclose(frames, [1 / 3, 1 / 3, -1.0])
    with pytest.raises(ValueError, match="give one task id per episode"):
        episode_baseline_advantages(returns, tasks[:5])


def test_blend_and_clip() -> None:
    early = np.array([1.0, -1.0, 4.0])
    gae = np.array([3.0, 1.0, -5.0])
    np.testing.assert_allclose(blend(early, gae, 0.0), early)
    np.testing.assert_allclose(blend(early, gae, 1.0), gae)
    np.testing.assert_allclose(blend(early, gae, 0.25), [1.5, -0.5, 1.75])
    np.testing.assert_allclose(clip_advantages([-3.0, -2.0, 0.5, 2.5]), [-2.0, -2.0, 0.5, 2.0])
    np.testing.assert_allclose(clip_advantages([-3.0, 0.7, 3.0], bound=0.5), [-0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match=r"blend weight must be in \[0, 1\], got 1.2"):
        blend(early, gae, 1.2)
    with pytest.raises(ValueError, match="clip bound must be > 0"):
        clip_advantages(early, bound=0.0)


def test_demo_and_intervention_frames_get_the_fixed_advantage() -> None:
    sim, human, wm = ORIGINS.index("sim"), ORIGINS.index("human"), ORIGINS.index("wm")
    origin = np.array([sim, human, sim, wm, sim], dtype=np.uint8)
    takeover = np.array([False, False, True, False, False])
    adv = np.array([-1.5, -0.3, -2.0, 0.4, 0.2])
    np.testing.assert_array_equal(
        demo_frames(origin, takeover, origin_names=ORIGINS), [False, True, True, False, False]
    )
    out = apply_demo_advantage(adv, origin, takeover, origin_names=ORIGINS)
    np.testing.assert_allclose(out, [-1.5, 1.0, 1.0, 0.4, 0.2])
    np.testing.assert_allclose(adv, [-1.5, -0.3, -2.0, 0.4, 0.2])  # input untouched
    custom = apply_demo_advantage(
        adv, origin, takeover, origin_names=ORIGINS, demo_origins=("human", "wm"), value=0.7
    )
    np.testing.assert_allclose(custom, [-1.5, 0.7, 0.7, 0.7, 0.2])
    with pytest.raises(ValueError, match=r"demo origins \['teleop'\] are not among"):
        demo_frames(origin, takeover, origin_names=ORIGINS, demo_origins=("teleop",))
    with pytest.raises(ValueError, match=r"origin code 9 is outside \[0, 4\)"):
        demo_frames([0, 9], [False, False], origin_names=ORIGINS)


def test_sampling_sources_of_frames() -> None:
    # rollout, scripted demo (`unilab collect`: no policy version), takeover inside a rollout,
    # teleoperated demo, world-model frame
    sim, human, wm = ORIGINS.index("sim"), ORIGINS.index("human"), ORIGINS.index("wm")
    origin = np.array([sim, sim, sim, human, wm], dtype=np.uint8)
    version = np.array([2, -1, 2, -1, 2])
    takeover = np.array([False, False, True, False, False])
    names = [SOURCES[k] for k in frame_sources(origin, version, ORIGINS, takeover)]
    assert names == ["sim", "expert", "human", "human", "wm"]
    # without the flags a takeover frame is counted as its origin's
    assert SOURCES[frame_sources(origin, version, ORIGINS)[2]] == "sim"


def test_recap_null_probability_end_points_and_midpoint() -> None:
    a = np.array([-3.0, -0.1, 0.0, 0.25, 0.5, 0.75, 1.0, 2.0])
    np.testing.assert_allclose(
        recap_null_probability(a), [0.5, 0.5, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1], atol=1e-12
    )
    # The advantage that reaches the low end is configurable.
    np.testing.assert_allclose(
        recap_null_probability([1.0, 2.0], full_advantage=2.0), [0.3, 0.1], atol=1e-12
    )
    with pytest.raises(ValueError, match=r"null_min=0\.6, null_max=0\.5"):
        recap_null_probability(a, null_min=0.6)
    with pytest.raises(ValueError, match="NaN"):
        recap_null_probability([np.nan])


def test_recap_indicator_values_and_masking_frequencies() -> None:
    n = 200_000
    rng = np.random.default_rng(0)
    for advantage, p_null, sign in [
        (-1.0, 0.5, NEGATIVE),
        (0.5, 0.3, POSITIVE),
        (2.0, 0.1, POSITIVE),
    ]:
        ind = recap_indicator(np.full(n, advantage), rng)
        assert set(np.unique(ind).tolist()) == {NULL, sign}
        # Binomial std of the null frequency is sqrt(p (1 - p) / n) <= 0.0012 for n = 200k;
        # a tolerance of 0.006 (5 std) fails by chance about once in 3 million runs.
        assert abs(np.mean(ind == NULL) - p_null) < 0.006
    # Advantage exactly 0 is "negative", not positive.
    assert set(np.unique(recap_indicator(np.zeros(1000), rng)).tolist()) == {NULL, NEGATIVE}
