"""The generator's ensemble filter (`unilab.worldmodel.consistency`): the verdict rule on
hand-made head probabilities; tiny real world models stepping the main path's actions
(an ensemble of the model itself agrees with it, a member with a pushed head removes
exactly what the rule says, a member of another seed matches a reference roll-out);
`generate` / `unilab wm generate` with an ensemble; members that do not fit are refused."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from unilab.bench.expert_demos import write_expert_store
from unilab.cli import main
from unilab.data.store import EpisodeStore
from unilab.worldmodel.consistency import (
    check_filter,
    ensemble_disagrees,
    member_verdict,
    verdict,
)
from unilab.worldmodel.fidelity import LoadedWorldModel, WorldModelRunError, load_world_model
from unilab.worldmodel.generate import generate, rollout_in_model
from unilab.worldmodel.model import WorldModel

TASK = ["task=arm_move_side", "task.cameras=[front]", "task.image_size=32"]
B, T = 8, 6


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, tiny: SimpleNamespace
) -> tuple[Path, Path, Path, Path]:
    """demos store, world models of seeds 0 and 1 on it, a bc_flow VLA on it."""
    root = tmp_path_factory.mktemp("wm_ensemble")
    demos = root / "demos.zarr"
    write_expert_store(demos, "arm_move_side", 4, overrides=TASK[1:], seed=0)
    base = [*TASK, *tiny.common, f"data.store={demos}"]
    for seed in (0, 1):
        args = ["wm", "train", *base, *tiny.wm, f"run.seed={seed}"]
        assert main([*args, f"run.out_dir={root / f'wm{seed}'}"]) == 0
    assert main(["train", *base, *tiny.vla, f"run.out_dir={root / 'vla'}"]) == 0
    (wm0,) = list((root / "wm0" / "arm_move_side" / "world_model").iterdir())
    (wm1,) = list((root / "wm1" / "arm_move_side" / "world_model").iterdir())
    (vla,) = list((root / "vla" / "arm_move_side" / "bc_flow").iterdir())
    return demos, wm0, wm1, vla


def pushed(loaded: LoadedWorldModel, done: float = 0.0, success: float = 0.0) -> LoadedWorldModel:
    """A copy whose done / success logits are shifted by a constant (the head's last two
    outputs)."""
    model = copy.deepcopy(loaded.model)
    with torch.no_grad():
        model.head.bias[-2] += done
        model.head.bias[-1] += success
    return LoadedWorldModel(model, loaded.proprio_field, loaded.checkpoint, loaded.step)


def roll(runs: tuple[Path, Path, Path, Path], main_wm: LoadedWorldModel, **kw):  # type: ignore[no-untyped-def]
    demos, _, _, vla = runs
    ro, _ = rollout_in_model(main_wm, vla, demos, episodes=B, max_steps=T, seed=3, **kw)
    return ro


def test_the_verdict_rule_on_hand_made_heads() -> None:
    done = np.array(
        [[0.1, 0.9, 0.9], [0.1, 0.2, 0.9], [0.1, 0.1, 0.1], [0.1, 0.1, 0.1], [0.6, 0.1, 0.1]]
    )
    win = np.array(
        [[0.2, 0.7, 0.1], [0.9, 0.9, 0.1], [0.3, 0.2, 0.9], [0.9, 0.9, 0.8], [0.4, 0.9, 0.9]]
    )
    length = np.array([3, 2, 2, 3, 3])
    ended = np.array([True, True, True, False, False])
    outcome, p = member_verdict(done, win, length, ended)
    # 0: fires at step 1, success 0.7; 1: fires only past the main path's length, which
    # ended: success at its last step; 2: same, a failure; 3: never fires, main truncated;
    # 4: fires at step 0 with failure although the main path was truncated.
    assert outcome.tolist() == [2, 2, 1, 0, 1]
    np.testing.assert_allclose(p, [0.7, 0.9, 0.2, 0.8, 0.4])

    main_outcome = np.array([2, 2, 2, 0, 0])
    members = np.array([outcome, [2, 2, 2, 0, 1]])
    assert ensemble_disagrees(main_outcome, members).tolist() == [False, False, True, False, True]
    assert ensemble_disagrees(main_outcome, members, 2).tolist() == [False] * 4 + [True]
    reencoded, drift = np.array([2, 1, 2, 0, 0]), np.array([0.1, 0.1, 0.9, 0.9, 0.1])
    keep, reason = verdict("both", main_outcome, reencoded, drift, 0.5, members)
    assert reason == ["", "outcome", "drift", "drift", "ensemble"]
    assert keep.tolist() == [True, False, False, False, False]
    assert verdict("ensemble", main_outcome, reencoded, drift, 0.5, members)[1] == [
        "",
        "",
        "ensemble",
        "",
        "ensemble",
    ]
    assert verdict("none", main_outcome, reencoded, drift, 0.5, members)[0].all()
    with pytest.raises(ValueError, match="needs at least one ensemble member"):
        check_filter("ensemble", 0)
    with pytest.raises(ValueError, match="use one of reencode, ensemble, both, state, none"):
        check_filter("vote", 2)


def test_an_ensemble_of_the_model_itself_agrees_and_changes_nothing_else(
    runs: tuple[Path, Path, Path, Path],
) -> None:
    _, wm0, _, _ = runs
    loaded = load_world_model(wm0)
    plain = roll(runs, loaded)
    twice = roll(runs, loaded, ensemble=[load_world_model(wm0), load_world_model(wm0)])
    assert twice.outcome_members.shape == (2, B) and plain.outcome_members.shape == (0, B)
    for key in plain.rows:  # the main path and the re-encode filter are untouched
        np.testing.assert_array_equal(plain.rows[key], twice.rows[key], err_msg=key)
    for name in ("length", "outcome", "outcome_reencoded", "drift", "keep"):
        np.testing.assert_array_equal(getattr(plain, name), getattr(twice, name), err_msg=name)
    assert (twice.outcome_members == twice.outcome).all()
    # the same with a main model whose done head fires at once (every outcome decided)
    ending = pushed(loaded, done=30.0)
    ro = roll(runs, ending, ensemble=[pushed(loaded, done=30.0)], filter="ensemble")
    assert (ro.outcome > 0).all() and (ro.length == 1).all()
    assert ro.keep.all() and ro.reason == [""] * B
    assert (ro.outcome_reencoded == -1).all() and np.isnan(ro.drift).all()  # not rolled


def test_a_disagreeing_member_removes_what_the_rule_says(
    runs: tuple[Path, Path, Path, Path],
) -> None:
    _, wm0, _, _ = runs
    loaded = load_world_model(wm0)
    ending = pushed(loaded, done=30.0)  # every rollout ends after one step
    base = roll(runs, ending, ensemble=[ending], filter="ensemble")
    p = base.success_members[0]  # the main path's own P(success) at its end
    win = base.outcome == 2
    np.testing.assert_array_equal(win, p > 0.5)

    def removed(member: LoadedWorldModel) -> np.ndarray:
        ro = roll(runs, ending, ensemble=[member], filter="ensemble")
        assert ro.reason == ["ensemble" if not k else "" for k in ro.keep]
        return np.asarray(~ro.keep)

    # a member that ends every episode at once in failure disagrees with the successes
    np.testing.assert_array_equal(removed(pushed(loaded, done=30.0, success=-30.0)), win)
    # one that never ends: the main path ended, so its success head at that step decides
    np.testing.assert_array_equal(removed(pushed(loaded, done=-30.0, success=30.0)), ~win)
    # a shifted success threshold flips exactly the episodes between the two thresholds
    logit = np.log(p / (1 - p))
    pos, neg = np.sort(logit[logit > 0]), np.sort(logit[logit <= 0])
    cut = (pos[-1] + pos[-2]) / 2 if len(pos) >= 2 else (neg[0] + neg[1]) / 2
    expect = (logit > 0) != (logit > cut)
    assert 0 < expect.sum() < B
    np.testing.assert_array_equal(removed(pushed(loaded, done=30.0, success=-cut)), expect)


@torch.no_grad()
def heads_along(
    loaded: LoadedWorldModel, demos: Path, picks: np.ndarray, actions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(B, T) P(done), P(success) of a model stepping `actions` open loop from the first
    frames of the `picks` episodes (the reference the generator's paths must match)."""
    m = loaded.model
    with EpisodeStore.open(demos, "r") as st:
        first = [st.episode(int(i), ["images/front", "obs/policy"]) for i in picks]
    z = m.encode({"front": torch.from_numpy(np.stack([e["images/front"][0] for e in first]))})
    prop = m.proprio_norm(torch.from_numpy(np.stack([e["obs/policy"][0] for e in first])))
    pad = torch.zeros(len(picks), 1, dtype=torch.bool)
    done, win = [], []
    for t in range(actions.shape[1]):
        z, prop, _, d, w = m.predict(z, prop, torch.from_numpy(actions[:, t : t + 1]), pad)
        done.append(torch.sigmoid(d).numpy())
        win.append(torch.sigmoid(w).numpy())
    return np.stack(done, 1), np.stack(win, 1)


def at_quantile(
    loaded: LoadedWorldModel, done: np.ndarray, win: np.ndarray, q: float
) -> LoadedWorldModel:
    """A copy whose done head fires on the top 1-q of the given (B, T) steps and whose
    success head says success on the top half (thresholds between two of the values)."""

    def cut(p: np.ndarray, quantile: float) -> float:
        logit = np.sort(np.log(p / (1 - p)).ravel())
        k = int(quantile * (len(logit) - 1))
        return float(logit[k] + logit[k + 1]) / 2

    return pushed(loaded, done=-cut(done, q), success=-cut(win, 0.5))


def test_a_member_of_another_seed_matches_a_reference_roll_out(
    runs: tuple[Path, Path, Path, Path],
) -> None:
    """Main and member with done / success thresholds inside the range of their own heads
    (episodes end at different steps, some never): the main path's ends and every member
    verdict are those of open-loop reference roll-outs of the same actions, by the rule."""
    demos, wm0, wm1, _ = runs
    never = pushed(load_world_model(wm0), done=-30.0)  # every rollout runs T steps
    plain_never = roll(runs, never)
    actions, picks = plain_never.rows["action"], plain_never.picks  # heads do not steer
    main_wm = at_quantile(never, *heads_along(never, demos, picks, actions), 0.75)
    other = load_world_model(wm1)
    member = at_quantile(other, *heads_along(other, demos, picks, actions), 0.6)
    ro = roll(runs, main_wm, ensemble=[member], filter="both")
    m_done, m_win = heads_along(main_wm, demos, picks, actions)
    k_done, k_win = heads_along(member, demos, picks, actions)
    length, outcome, verdicts = np.full(B, T), np.zeros(B, np.int64), np.zeros(B, np.int64)
    for e in range(B):
        fired = np.flatnonzero(m_done[e] > 0.5)
        if len(fired):
            length[e] = fired[0] + 1
            outcome[e] = 2 if m_win[e, fired[0]] > 0.5 else 1
        fired = np.flatnonzero(k_done[e, : length[e]] > 0.5)
        step = fired[0] if len(fired) else length[e] - 1
        if len(fired) or outcome[e]:
            verdicts[e] = 2 if k_win[e, step] > 0.5 else 1
    np.testing.assert_array_equal(ro.length, length)
    np.testing.assert_array_equal(ro.outcome, outcome)
    np.testing.assert_array_equal(ro.outcome_members[0], verdicts)
    assert len(set(length.tolist())) > 1 and len(set(outcome.tolist())) > 1
    disagree = verdicts != outcome
    assert 0 < disagree.sum() < B
    plain = roll(runs, main_wm).reason  # the re-encode check comes first, then the ensemble
    assert ro.reason == [
        r or ("ensemble" if d else "") for r, d in zip(plain, disagree.tolist(), strict=True)
    ]


def test_generate_with_an_ensemble_writes_the_kept_episodes_deterministically(
    runs: tuple[Path, Path, Path, Path], tmp_path: Path
) -> None:
    demos, wm0, wm1, vla = runs
    loaded = load_world_model(wm0)
    ending = pushed(loaded, done=30.0)
    member = pushed(loaded, done=30.0, success=-30.0)  # removes the predicted successes
    ro = roll(runs, ending, ensemble=[member], filter="ensemble")
    reports = []
    for name in ("a", "b"):
        reports.append(
            generate(
                ending,
                vla,
                demos,
                tmp_path / f"{name}.zarr",
                episodes=B,
                max_steps=T,
                seed=3,
                ensemble=[member],
                filter="ensemble",
            )
        )
    assert reports[0].dropped == {"ensemble": int((~ro.keep).sum())}
    assert reports[0].kept == reports[1].kept == int(ro.keep.sum())
    kept = np.flatnonzero(ro.keep)
    with (
        EpisodeStore.open(tmp_path / "a.zarr", "r") as a,
        EpisodeStore.open(tmp_path / "b.zarr", "r") as b,
    ):
        assert len(a) == len(b) == len(kept)
        for i, e in enumerate(kept):
            ea, eb = a.episode(i), b.episode(i)
            for key in ea:
                np.testing.assert_array_equal(ea[key], eb[key], err_msg=key)
            np.testing.assert_array_equal(ea["action"], ro.rows["action"][e, : ro.length[e]])
            tags = a.meta(i).tags
            assert tags["ensemble"]["outcomes"] == [int(ro.outcome_members[0, e])]
            assert "consistency_drift" not in tags  # the re-encoded path was not rolled
            assert a.meta(i).success is False  # every success was removed

    # the CLI: `--ensemble A B store=OUT` (the option's list does not swallow the output)
    out = tmp_path / "cli.zarr"
    args = ["wm", "generate", str(wm0), "--policy", str(vla), "--start-store", str(demos)]
    args += ["--episodes", "3", "--max-steps", "4"]
    ensemble = ["--ensemble", str(wm0), str(wm1)]
    assert main([*args, "--filter", "none", *ensemble, f"store={out}"]) == 0
    with EpisodeStore.open(out, "r") as st:
        assert len(st) == 3
        assert all(len(m.tags["ensemble"]["outcomes"]) == 2 for m in st.all_meta())
    assert main([*args, "--filter", "ensemble", *ensemble, f"store={out}"]) == 0
    assert main([*args, "--ensemble", str(tmp_path / "nope"), f"store={out}"]) == 2
    assert main([*args, "--ensemble", str(vla), f"store={out}"]) == 2  # not a world model
    assert main([*args, "--filter", "both", f"store={out}"]) == 2  # no members


def test_members_that_do_not_fit_are_refused(runs: tuple[Path, Path, Path, Path]) -> None:
    _, wm0, _, _ = runs
    loaded = load_world_model(wm0)
    m = loaded.model

    def member(cameras: list[str], action_dim: int) -> LoadedWorldModel:
        model = WorldModel(cameras, m.size, m.proprio_dim, action_dim, 1, latent=16, channels=[8])
        return LoadedWorldModel(model, loaded.proprio_field, Path("member.pt"), 0)

    wrong = rf"member 0 .*action_dim {m.action_dim + 1} \(main: {m.action_dim}\)"
    with pytest.raises(WorldModelRunError, match=wrong):
        roll(runs, loaded, ensemble=[member(["front"], m.action_dim + 1)], filter="ensemble")
    with pytest.raises(WorldModelRunError, match=r"member 1 .*cameras \('wrist',\)"):
        roll(runs, loaded, ensemble=[loaded, member(["wrist"], m.action_dim)])
