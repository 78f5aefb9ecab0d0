"""`unilab improve` end to end on a tiny setup: a bc_flow run on expert demonstrations, two
rounds of rollouts (recorded with their outcomes), awr_flow from the previous run (the
second round blends in GAE over the first round's value heads), evaluation and the rounds'
JSON; a round whose rollouts the scripted expert takes over (`--takeover-after`), and the
same flag on `unilab play`; clear errors for bad inputs before anything starts."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from unilab.algos.frame_advantages import FrameTable, baseline_groups
from unilab.bench.expert_demos import write_expert_store
from unilab.cli import main
from unilab.data.dataset import FrameDataset
from unilab.data.store import EpisodeStore
from unilab.deploy.play import play
from unilab.deploy.policy_source import LoadedPolicy, load_policy
from unilab.deploy.sim_task import configs_for_policy
from unilab.runtime.policy import ActionChunk

TASK = ["task=arm_move_side", "task.state_policy=true", "task.cameras=[]"]
TINY = [
    "algo.batch_size=16",
    "algo.warmup_steps=2",
    "algo.model.width=32",
    "algo.model.heads=2",
    "algo.model.horizon=8",
    "algo.model.n_act=4",
    "algo.model.num_steps=3",
    "algo.model.prefix_layers=1",
    "algo.model.expert_layers=1",
    "algo.val_every=4",
    "runtime.learner_threads=1",
    "run.quiet=true",
    "run.play_episodes=0",
    "run.export=false",
    "eval.every=0",
]


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def bc_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("improve")
    demos = root / "demos.zarr"
    write_expert_store(demos, "arm_move_side", 4, overrides=TASK[1:], seed=0)
    argv = [*TASK, "algo=bc_flow", f"data.store={demos}", *TINY, "algo.steps=4"]
    assert main(["train", *argv, f"run.out_dir={root / 'runs'}"]) == 0
    (run,) = list((root / "runs" / "arm_move_side" / "bc_flow").iterdir())
    return run


def test_one_improve_round_end_to_end(bc_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "loop"
    t0 = time.perf_counter()
    code = main(
        [
            "improve",
            str(bc_run),
            "--rounds",
            "2",
            "--episodes",
            "2",
            "--eval-episodes",
            "2",
            "--out",
            str(out),
            "algo.steps=3",
            "algo.batch_size=16",
            "algo.warmup_steps=1",
        ]
    )
    assert code == 0
    assert time.perf_counter() - t0 < 60
    report = json.loads((out / "improve.json").read_text())
    summary, second = report["rounds"]
    assert summary == json.loads((out / "round_1" / "round.json").read_text())
    assert 0.0 <= summary["eval"]["success_rate"] <= 1.0 and summary["eval"]["episodes"] == 2
    assert 0.0 <= report["baseline"]["eval"]["success_rate"] <= 1.0
    # the store: a copy of the demos (expert source) plus the round's rollouts (sim source),
    # recorded with their outcomes
    frames = summary["store_frames"]
    assert frames["episodes"] == 4 + summary["rollouts"]["recorded_episodes"]
    assert summary["rollouts"]["recorded_episodes"] >= 2
    with EpisodeStore.open(summary["rollouts"]["store"], "r") as kept:  # the round's own
        assert len(kept) == summary["rollouts"]["recorded_episodes"]
    assert set(frames["by_source"]) == {"expert", "sim"}
    assert frames["by_origin"] == {"sim": frames["total"]}
    with EpisodeStore.open(out / "store.zarr", "r") as st:
        metas = st.all_meta()
        assert all(m.success is not None for m in metas)
        assert [m.success for m in metas[:4]] == [True] * 4 and len(metas) > frames["episodes"]
    # the round's run: awr_flow from the bc_flow run, on the loop's store, iteration 0
    run = Path(summary["run"])
    assert run.is_relative_to(out / "round_1")
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["algo"]["name"] == "awr_flow" and cfg["algo"]["init"] == str(bc_run)
    assert cfg["algo"]["iteration"] == 0 and cfg["data"]["store"] == str(out / "store.zarr")
    assert cfg["algo"]["model"]["inference_advantage"] == 1
    assert cfg["algo"]["model"]["width"] == 32  # the init's network
    stats = summary["advantages"]
    assert stats["gae_weight"] == 0.0  # the bc_flow init has no value heads
    # demos are pinned at +1; rollouts average to 0 within their task with the demos
    ds = FrameDataset(out / "store.zarr")  # round 1 trained on its first n episodes
    n = frames["episodes"]
    success = np.array([m.success for m in metas[:n]], float)
    lengths = np.bincount(ds.episode_of)[:n]
    expected = np.concatenate(
        [np.ones(lengths[:4].sum()), np.repeat(success[4:] - success.mean(), lengths[4:])]
    )
    assert stats["adv_mean"] == pytest.approx(expected.mean(), abs=1e-6)
    ds.close()

    # round 2 starts from round 1's run, whose value heads (value_weight 0.5) are trained:
    # the GAE blend weight is gae_weight_step x iteration, the demos' share has decayed
    assert second["init"] == summary["run"] and second["iteration"] == 1
    cfg2 = yaml.safe_load((Path(second["run"]) / "config.yaml").read_text())
    assert cfg2["algo"]["init"] == summary["run"] and cfg2["algo"]["model"]["value_heads"]
    assert second["advantages"]["gae_weight"] == pytest.approx(0.5)
    assert second["advantages"]["share_expert"] < stats["share_expert"]
    assert (
        second["store_frames"]["episodes"]
        == frames["episodes"] + (second["rollouts"]["recorded_episodes"])
    )


def test_a_round_with_expert_takeovers_trains_on_interventions(
    bc_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "hil"
    argv = ["improve", str(bc_run), "--episodes", "3", "--eval-episodes", "2"]
    argv += ["--takeover-after", "0.5", "--out", str(out), "algo.steps=2", "algo.batch_size=16"]
    assert main(argv) == 0
    (summary,) = json.loads((out / "improve.json").read_text())["rounds"]
    rollouts = summary["rollouts"]
    # the 4-step policy finishes nothing in half a second: the expert takes every episode
    assert rollouts["takeover"]["episodes"] == rollouts["episodes"] >= 3
    assert rollouts["success_rate"] == 0.0  # the policy's own successes
    takeover_step = round(0.5 / 0.05)  # arm_move_side runs at 20 Hz
    with EpisodeStore.open(rollouts["store"], "r") as st:
        assert len(st) == rollouts["recorded_episodes"]
        for i in range(len(st)):
            flags = st.episode(i, ["is_intervention"])["is_intervention"]
            assert not flags[:takeover_step].any() and flags[takeover_step:].all()
            assert st.meta(i).success is False and st.meta(i).tags["intervened"] is True
        rescued = sum(bool(m.tags["task_success"]) for m in st.all_meta())
    assert rescued == rollouts["takeover"]["rescued"]
    # the loop's store carries the intervention flags: awr_flow pins those frames at +1
    with EpisodeStore.open(out / "store.zarr", "r") as loop_store:
        assert loop_store.read("is_intervention").sum() > 0


def test_repeated_scenes_start_alike_and_are_judged_by_their_own_tries(
    bc_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "repeats"
    argv = ["improve", str(bc_run), "--episodes", "4", "--repeats", "2", "--eval-episodes", "2"]
    assert main([*argv, "--out", str(out), "algo.steps=2", "algo.batch_size=16"]) == 0
    report = json.loads((out / "improve.json").read_text())
    (summary,) = report["rounds"]
    rollouts = summary["rollouts"]
    assert report["repeats"] == 2
    assert rollouts["episodes"] == 4 and rollouts["scenes"] == 2 and rollouts["repeats"] == 2
    assert 0 <= rollouts["mixed_scenes"] <= 2
    with EpisodeStore.open(rollouts["store"], "r") as st:
        assert rollouts["env_steps"] == st.num_frames  # every played episode is recorded
        scenes = [m.tags["scene"] for m in st.all_meta()]
        assert len(set(scenes)) == 2 and all(scenes.count(s) == 2 for s in scenes)
        first = {}
        for i, scene in enumerate(scenes):
            ep = st.episode(i, ["obs/policy", "action"])
            if scene in first:  # the second try: the same start, other noise, other actions
                obs0, act0 = first[scene]
                np.testing.assert_array_equal(ep["obs/policy"][0], obs0)
                assert not np.array_equal(ep["action"][:4], act0)
            else:
                first[scene] = (ep["obs/policy"][0], ep["action"][:4])
        (start_a, _), (start_b, _) = first.values()
        assert not np.array_equal(start_a, start_b)  # two scenes, two starts
    # in the loop's store the demos keep the task's baseline, each scene's tries their own
    ds = FrameDataset(out / "store.zarr")
    table = FrameTable.from_frames(ds)
    groups = baseline_groups(table.tasks, table.scenes)
    ds.close()
    assert groups[:4] == ["task:arm_move_side"] * 4
    assert len(set(groups[4:])) == 2 and all(g.startswith("scene:") for g in groups[4:])
    # tries per scene must divide the episodes; refused before anything starts
    for bad in (["--episodes", "3", "--repeats", "2"], ["--episodes", "4", "--repeats", "0"]):
        assert main(["improve", str(bc_run), *bad, "--out", str(tmp_path / "no")]) == 2
    assert not (tmp_path / "no").exists()


def test_the_control_trains_on_the_demonstrations_alone(bc_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "control"
    argv = ["improve", str(bc_run), "--episodes", "0", "--eval-episodes", "2"]
    assert main([*argv, "--out", str(out), "algo.steps=2", "algo.batch_size=16"]) == 0
    (summary,) = json.loads((out / "improve.json").read_text())["rounds"]
    assert summary["rollouts"]["episodes"] == 0 and not (out / "round_1" / "rollouts.zarr").exists()
    assert summary["store_frames"]["episodes"] == 4  # the demos, nothing added
    assert summary["store_frames"]["by_source"] == {"expert": summary["store_frames"]["total"]}
    # a control has nothing to take over
    bad = ["improve", str(bc_run), "--episodes", "0", "--takeover-after", "5"]
    assert main([*bad, "--out", str(tmp_path / "no")]) == 2
    bad = ["improve", str(bc_run), "--episodes", "0", "--takeover-on-error"]
    assert main([*bad, "--out", str(tmp_path / "no")]) == 2


def test_play_with_a_takeover_records_interventions(bc_run: Path, tmp_path: Path) -> None:
    store = tmp_path / "played.zarr"
    argv = ["play", str(bc_run), "--episodes", "2", "--takeover-after", "0.25", "--no-video"]
    assert main([*argv, "--out", str(tmp_path), f"record={store}"]) == 0
    with EpisodeStore.open(store, "r") as st:
        flags = st.read("is_intervention")
        assert len(st) == 2 and flags.any() and not flags.all()
    bad = ["play", str(bc_run), "--takeover-after", "-1", "--out", str(tmp_path)]
    assert main(bad) == 2
    assert main(["play", "expert", "task=arm_move_side", "--takeover-after", "1"]) == 2
    assert main(["play", "expert", "task=arm_move_side", "--takeover-on-error"]) == 2
    # arm_move_side's expert cannot tell a mistake (its push closes the fingers on purpose):
    # a takeover on mistakes alone would never come, in play or in improve
    assert main(["play", str(bc_run), "--takeover-on-error", "--out", str(tmp_path)]) == 2
    never = tmp_path / "never"
    argv = ["improve", str(bc_run), "--episodes", "2", "--takeover-on-error", "--out", str(never)]
    assert main(argv) == 2 and not never.exists()


def test_bad_inputs_are_refused_before_anything_starts(bc_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "nothing"
    assert main(["improve", str(bc_run), "--rounds", "0", "--out", str(out)]) == 2
    assert main(["improve", str(bc_run), "--episodes", "-1", "--out", str(out)]) == 2
    assert main(["improve", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert main(["improve", str(tmp_path), "--out", str(out)]) == 2  # not a run directory
    assert not out.exists()


def test_a_round_whose_training_fails_stops_the_loop_with_what_is_kept(
    bc_run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import unilab.workflows.train as train_module

    def fails(cfg: object) -> None:
        raise SystemExit(1)  # what train does when a run ends with problems (e.g. its export)

    monkeypatch.setattr(train_module, "train", fails)
    out = tmp_path / "failing"
    argv = ["improve", str(bc_run), "--episodes", "0", "--eval-episodes", "1", "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        "round 1's training ended with problems" in err and "holds the 0 finished round(s)" in err
    )
    assert json.loads((out / "improve.json").read_text())["rounds"] == []


class Overdriven:
    """A policy whose every action is three times the trained one's: outside the task's
    [-1, 1], which the task clips before executing."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.obs_groups = policy.obs_groups
        self.action_dim = policy.action_dim
        self.action_horizon = policy.action_horizon

    def act(self, obs: Any, deterministic: bool = False) -> ActionChunk:
        return ActionChunk(self.act_inference(obs))

    def act_inference(self, obs: Any) -> np.ndarray:
        return 3.0 * np.asarray(self.policy.act_inference(obs)) + 1.5


def test_play_records_the_actions_the_task_executed(bc_run: Path, tmp_path: Path) -> None:
    # the next round imitates the stored actions: they must be what was executed
    loaded = load_policy(bc_run)
    loud = LoadedPolicy(Overdriven(loaded.policy), loaded.metadata, loaded.source)
    meta = loaded.metadata
    task_cfg, sim_cfg = configs_for_policy(meta.task_config, meta.sim_config, [])
    store = tmp_path / "loud.zarr"
    play(loud, task_cfg, sim_cfg, tmp_path, "loud", episodes=2, video=False, rerun=False,
         record=store)  # fmt: skip
    with EpisodeStore.open(store, "r") as st:
        actions = st.read("action")
    assert len(actions) > 0 and np.abs(actions).max() <= 1.0
    assert (actions == 1.0).mean() > 0.5  # mostly driven to the bound, and stored there


def test_tuned_inference_settings_run_every_rollout_and_evaluation(
    bc_run: Path, tmp_path: Path
) -> None:
    settings = tmp_path / "tuned.json"
    settings.write_text(json.dumps({"n_act": 2, "ensemble_decay": 0.01, "flow_steps": 2}))
    out = tmp_path / "tuned"
    argv = ["improve", str(bc_run), "--episodes", "2", "--eval-episodes", "2"]
    argv += ["--inference-settings", str(settings), "--out", str(out), "algo.steps=2"]
    assert main(argv) == 0
    report = json.loads((out / "improve.json").read_text())
    want = {"n_act": 2, "ensemble_decay": 0.01, "flow_steps": 2}
    assert report["inference_settings"] == want
    (summary,) = report["rounds"]
    for evaluation in (report["baseline"]["eval"], summary["eval"]):
        execution = evaluation["execution"]
        assert execution["inference_settings"] == want
        assert (execution["n_act"], execution["flow_steps"]) == (2, 2)  # trained with n_act 4, K 3
    # the rollouts ran through the same loader (`load_with_settings`) and were recorded
    with EpisodeStore.open(summary["rollouts"]["store"], "r") as kept:
        assert len(kept) == 2
    # a setting the policy cannot use is refused before anything is written
    settings.write_text(json.dumps({"best_of_n": 2}))
    never = tmp_path / "never"
    argv = ["improve", str(bc_run), "--episodes", "2", "--inference-settings", str(settings)]
    assert main([*argv, "--out", str(never)]) == 2 and not never.exists()


def test_retune_tunes_every_run_and_runs_its_recommendation(
    bc_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import unilab.deploy.tune_inference as tuning

    # The tiny policy never succeeds, so the guard would keep the defaults; recommend the
    # choice here to see it travel (the guard itself: test below and tests/deploy).
    monkeypatch.setattr(
        tuning,
        "recommend",
        lambda chosen, defaults, chosen_arm, defaults_arm: {
            "recommended": dict(chosen),
            "recommendation": "the test's: always the choice",
        },
    )
    out = tmp_path / "retuned"
    argv = ["improve", str(bc_run), "--rounds", "2", "--episodes", "2", "--eval-episodes", "2"]
    argv += ["--retune", "1", "--retune-episodes", "1", "--retune-compare-seeds", "1"]
    argv += [
        "--retune-space",
        "n_act=2",
        "--retune-space",
        "flow_steps=2",
        "--seed",
        "7",
        "--out",
        str(out),
    ]
    assert main([*argv, "algo.steps=2"]) == 0
    report = json.loads((out / "improve.json").read_text())
    want = {"n_act": 2, "flow_steps": 2}
    assert report["retune"]["episodes_per_tuning"] == 3  # 1 bandit round + 2 arms x 1 seed
    assert report["inference_settings"] == want  # the start's, from its own tuning
    start_tune = json.loads((out / "tune_start.json").read_text())
    assert start_tune["rounds"][0]["seed"] == 7 + 500
    assert report["baseline"]["tune"]["recommended"] == want
    assert report["baseline"]["eval"]["execution"]["inference_settings"] == want
    for k, summary in enumerate(report["rounds"], start=1):
        tune = json.loads((out / f"round_{k}" / "tune.json").read_text())
        assert tune["source"].startswith(summary["run"])  # the round's own run was tuned
        assert tune["rounds"][0]["seed"] == 7 + 1000 * k + 500
        assert summary["tune"]["recommended"] == want == summary["inference_settings"]
        execution = summary["eval"]["execution"]
        assert (execution["n_act"], execution["flow_steps"]) == (2, 2)  # trained with 4 and 3
        assert summary["rollouts"]["inference_settings"] == want  # the previous run's tuning


def test_retune_keeps_the_defaults_unless_the_choice_beat_them(
    bc_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "control"
    argv = ["improve", str(bc_run), "--episodes", "0", "--eval-episodes", "2", "--out", str(out)]
    argv += ["--retune", "1", "--retune-episodes", "2", "--retune-space", "n_act=2"]
    assert main([*argv, "algo.steps=2"]) == 0
    (summary,) = json.loads((out / "improve.json").read_text())["rounds"]
    tune = summary["tune"]
    assert tune["chosen"] == {"n_act": 2} and tune["defaults"] == {"n_act": 4}
    beat = tune["chosen_success"] > tune["defaults_success"]
    assert tune["recommended"] == (tune["chosen"] if beat else tune["defaults"])
    assert summary["eval"]["execution"]["n_act"] == tune["recommended"]["n_act"]


def test_retune_bad_budgets_are_refused_before_anything_is_written(
    bc_run: Path, tmp_path: Path
) -> None:
    for extra in (
        ["--retune", "0"],
        ["--retune", "2", "--retune-space", "best_of_n=2"],  # no value heads to rank by
        ["--retune", "2", "--retune-space", "speed=2"],
        ["--retune-compare-seeds", "3"],  # without --retune
        ["--retune-episodes", "4"],
    ):
        never = tmp_path / "never"
        assert main(["improve", str(bc_run), "--episodes", "2", "--out", str(never), *extra]) == 2
        assert not never.exists(), extra
