"""Thompson sampling over inference settings: on a synthetic bandit with one better value per
setting the posteriors, `best()` and the late proposals move to it; decay pulls the
evidence back to the prior; the state survives a plain-JSON round trip; bad spaces and
updates are refused with errors that say what is wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest

from unilab.deploy.inference_tuning import DEFAULT_SPACE, SettingsBandit, SettingValue

SPACE: dict[str, list[SettingValue]] = {
    "n_act": [2, 4, 8, 16],
    "guidance_scale": [1.0, 1.5, 2.0],
    "best_of_n": [1, 4],
}
BETTER = {"n_act": 8, "guidance_scale": 1.5, "best_of_n": 4}
"""The value of each setting with the higher success probability."""


def _success_probability(settings: dict[str, SettingValue]) -> float:
    # Each setting adds 0.25 to the success probability when it holds its better value.
    return 0.1 + 0.25 * sum(settings[k] == v for k, v in BETTER.items())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_posteriors_move_to_the_better_value_of_every_setting(seed: int) -> None:
    bandit = SettingsBandit(SPACE, seed=seed)
    rng = np.random.default_rng(100 + seed)
    rounds, trials = 300, 4
    proposals = []
    for _ in range(rounds):
        settings = bandit.propose()
        proposals.append(settings)
        successes = int(rng.binomial(trials, _success_probability(settings)))
        bandit.update(settings, successes, trials)
    assert bandit.best() == BETTER
    means = bandit.means()
    for name, better in BETTER.items():
        i = SPACE[name].index(better)
        others = [m for j, m in enumerate(means[name]) if j != i]
        assert means[name][i] > max(others) + 0.1, (name, means[name])
        late = [p[name] == better for p in proposals[-100:]]
        assert np.mean(late) > 0.75, (name, np.mean(late))


def test_propose_returns_one_listed_value_per_setting() -> None:
    bandit = SettingsBandit(seed=3)
    settings = bandit.propose()
    assert set(settings) == set(DEFAULT_SPACE)
    assert all(settings[k] in DEFAULT_SPACE[k] for k in settings)


def test_update_credits_only_the_chosen_values() -> None:
    bandit = SettingsBandit(SPACE)
    bandit.update({"n_act": 4, "best_of_n": 1}, successes=3, trials=5)
    np.testing.assert_allclose(bandit.alpha["n_act"], [1, 4, 1, 1])
    np.testing.assert_allclose(bandit.beta["n_act"], [1, 3, 1, 1])
    np.testing.assert_allclose(bandit.alpha["best_of_n"], [4, 1])
    np.testing.assert_allclose(bandit.alpha["guidance_scale"], [1, 1, 1])  # left out
    # Numbers match by value: 4.0 and numpy's 4 are the listed 4.
    bandit.update({"n_act": np.int64(4), "guidance_scale": 2}, successes=1, trials=1)  # type: ignore[dict-item]
    np.testing.assert_allclose(bandit.alpha["n_act"], [1, 5, 1, 1])
    np.testing.assert_allclose(bandit.alpha["guidance_scale"], [1, 1, 2])


def test_decay_pulls_counts_toward_the_prior() -> None:
    bandit = SettingsBandit(SPACE, decay=0.5)
    bandit.update({"n_act": 8}, successes=8, trials=10)  # alpha 9, beta 3 for n_act 8
    bandit.decay_round()
    assert bandit.alpha["n_act"][2] == pytest.approx(1 + 0.5 * 8)
    assert bandit.beta["n_act"][2] == pytest.approx(1 + 0.5 * 2)
    for _ in range(40):
        bandit.decay_round()
    np.testing.assert_allclose(bandit.alpha["n_act"], 1.0, atol=1e-9)
    np.testing.assert_allclose(bandit.beta["n_act"], 1.0, atol=1e-9)
    assert bandit.means()["n_act"] == pytest.approx([0.5] * 4)
    keep = SettingsBandit(SPACE, decay=1.0)
    keep.update({"n_act": 8}, successes=8, trials=10)
    keep.decay_round()
    assert keep.alpha["n_act"][2] == 9.0


def test_json_round_trip_keeps_posteriors_and_random_stream() -> None:
    bandit = SettingsBandit(decay=0.9, seed=5)
    for _ in range(10):
        settings = bandit.propose()
        bandit.update(settings, successes=1, trials=2)
    text = bandit.to_json()
    assert json.loads(text)["space"]["ensemble_decay"][0] is None  # plain JSON
    restored = SettingsBandit.from_json(text)
    assert restored.space == bandit.space
    assert restored.decay == 0.9
    assert restored.means() == bandit.means()
    assert restored.best() == bandit.best()
    assert [restored.propose() for _ in range(5)] == [bandit.propose() for _ in range(5)]
    with pytest.raises(ValueError, match="not a settings bandit state"):
        SettingsBandit.from_json(json.dumps({"format": "other"}))
    doc = json.loads(text)
    doc["alpha"]["n_act"] = [1.0, 0.5, 1.0, 1.0]
    with pytest.raises(ValueError, match=r"alpha\['n_act'\] must hold 4 numbers >= 1"):
        SettingsBandit.from_json(json.dumps(doc))


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({}, "the settings space is empty"),
        ({"n_act": []}, "setting 'n_act' has no values"),
        ({"n_act": 4}, "setting 'n_act': values must be a list, got 4"),
        ({"n_act": [2, 4, 4.0]}, r"setting 'n_act' lists a value twice: \[2, 4, 4.0\]"),
        ({"n_act": [[2, 4]]}, r"value \[2, 4\] is not a JSON scalar"),
        ({"guidance_scale": [1.0, float("nan")]}, "value nan is not finite"),
    ],
)
def test_bad_space_is_refused(space: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SettingsBandit(space)  # type: ignore[arg-type]


def test_bad_updates_and_decay_are_refused() -> None:
    bandit = SettingsBandit(SPACE)
    with pytest.raises(ValueError, match=r"unknown setting 'temperature'"):
        bandit.update({"temperature": 1.0}, 1, 1)
    with pytest.raises(
        ValueError, match=r"setting 'n_act' has no value 3; values: \[2, 4, 8, 16\]"
    ):
        bandit.update({"n_act": 3}, 1, 1)
    with pytest.raises(ValueError, match=r"successes must be in \[0, trials=2\], got 3"):
        bandit.update({"n_act": 4}, 3, 2)
    # A refused update changes nothing, even for the settings listed before the bad one.
    with pytest.raises(ValueError):
        bandit.update({"n_act": 4, "best_of_n": 3}, 1, 1)
    np.testing.assert_allclose(bandit.alpha["n_act"], 1.0)
    with pytest.raises(ValueError, match=r"decay must be in \[0, 1\], got 1.1"):
        SettingsBandit(SPACE, decay=1.1)
    # True is not the number 1.
    flags = SettingsBandit({"ensemble": [True, False], "best_of_n": [1, 2]})
    with pytest.raises(ValueError, match="has no value True"):
        flags.update({"best_of_n": True}, 1, 1)
