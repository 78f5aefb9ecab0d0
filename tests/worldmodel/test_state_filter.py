"""The generator's `state` filter: the task's success rule on the model's predicted end
state against its success head. Hand-made verdicts; tiny real world models of the critic
state (`task.state_policy=true`): the rule of `task_state_rule` is the task's own, episodes
are dropped exactly where rule and head differ, a model of images + arm state is refused."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from unilab.bench.expert_demos import write_expert_store
from unilab.cli import main
from unilab.config import compose
from unilab.data.store import EpisodeStore
from unilab.tasks.registry import make_task
from unilab.worldmodel.consistency import check_filter, state_disagrees, verdict
from unilab.worldmodel.fidelity import LoadedWorldModel, WorldModelRunError, load_world_model
from unilab.worldmodel.generate import generate, rollout_in_model
from unilab.worldmodel.state_rule import task_state_rule

SCENE = ["task.cameras=[front]", "task.image_size=32"]


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, tiny: SimpleNamespace
) -> tuple[Path, Path, Path, Path]:
    """demos store of the critic state, a world model and a VLA on it, and a world model
    of the arm's state only (no objects)."""
    root = tmp_path_factory.mktemp("wm_state")
    demos, arm_only = root / "demos.zarr", root / "arm.zarr"
    write_expert_store(demos, "arm_move_side", 4, overrides=[*SCENE, "task.state_policy=true"])
    write_expert_store(arm_only, "arm_move_side", 2, overrides=SCENE)
    base = ["task=arm_move_side", *SCENE, *tiny.common]
    state = [*base, "task.state_policy=true", f"data.store={demos}"]
    assert main(["wm", "train", *state, *tiny.wm, f"run.out_dir={root / 'wm'}"]) == 0
    assert main(["train", *state, *tiny.vla, f"run.out_dir={root / 'vla'}"]) == 0
    arm = [*base, f"data.store={arm_only}", *tiny.wm, f"run.out_dir={root / 'arm'}"]
    assert main(["wm", "train", *arm]) == 0

    def one(folder: str, algo: str) -> Path:
        (run,) = list((root / folder / "arm_move_side" / algo).iterdir())
        return run

    return demos, one("wm", "world_model"), one("vla", "bc_flow"), one("arm", "world_model")


def test_verdicts_by_hand() -> None:
    outcome = np.array([2, 2, 1, 0, 1])
    rule = np.array([True, False, False, True, True])
    np.testing.assert_array_equal(state_disagrees(outcome, rule), [False, True, False, True, True])
    keep, reason = verdict("state", outcome, outcome, np.zeros(5), 1.0, np.zeros((0, 5)), rule)
    assert reason == ["", "state", "", "state", "state"]
    np.testing.assert_array_equal(keep, [True, False, True, False, False])
    with pytest.raises(ValueError, match="needs the task's success rule"):
        check_filter("state", 0, state_rule=False)


def test_the_rule_is_the_tasks_and_refuses_arm_only_models(runs) -> None:  # type: ignore[no-untyped-def]
    _, wm, _, arm = runs
    rule = task_state_rule(wm)
    task = make_task(
        compose(["task=arm_move_side", "task.cameras=[]", "task.state_policy=true"]).task,
        num_envs=4,
        seed=5,
    )
    critic = task.reset()["critic"]
    expected = task.success_from_state(critic)
    assert expected is not None
    np.testing.assert_array_equal(rule(critic), expected)
    moved = critic.copy()  # every named cube put on its side, on the table, at rest
    parts = task.critic_parts(moved)  # views into `moved`
    side = parts["task_state"].argmax(1)
    parts["cube_pos"][:, 0] = np.array([[0.5, 0.3, 0.02], [0.5, -0.3, 0.02], [0.75, 0.0, 0.02]])[
        side
    ]
    parts["cube_vel"][:, 0] = 0.0
    assert rule(moved).all() and not rule(critic).any()
    with pytest.raises(WorldModelRunError, match=r"task\.state_policy=true"):
        task_state_rule(arm)


def test_state_filter_drops_where_rule_and_head_differ(runs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    demos, wm, vla, _ = runs
    loaded = load_world_model(wm)
    # a model whose done and success heads always fire: every episode ends at once a success
    model = copy.deepcopy(loaded.model)
    with torch.no_grad():
        model.head.bias[-2:] += 50.0
    sure = LoadedWorldModel(model, loaded.proprio_field, loaded.checkpoint, loaded.step)
    says_no = lambda s: np.zeros(len(s), bool)  # noqa: E731
    says_some = lambda s: np.arange(len(s)) % 2 == 0  # noqa: E731
    ro, _ = rollout_in_model(
        sure, vla, demos, episodes=6, max_steps=5, filter="state", state_rule=says_no
    )
    assert (ro.outcome == 2).all() and (ro.length == 1).all()
    assert not ro.keep.any() and ro.reason == ["state"] * 6
    ro, _ = rollout_in_model(
        sure, vla, demos, episodes=6, max_steps=5, filter="state", state_rule=says_some
    )
    np.testing.assert_array_equal(ro.keep, [True, False] * 3)
    # the rule sees the predicted end state (denormalised critic vectors)
    seen: list[np.ndarray] = []
    rollout_in_model(
        sure,
        vla,
        demos,
        episodes=3,
        max_steps=5,
        filter="none",
        state_rule=lambda s: seen.append(s) or np.zeros(len(s), bool),
    )
    (state,) = seen
    with EpisodeStore.open(demos, "r") as st:
        width = st.schema.fields["obs/policy"].shape[0]
    assert state.shape == (3, width) and np.isfinite(state).all()
    # generate writes only the kept episodes, each with the rule's verdict
    report = generate(
        sure,
        vla,
        demos,
        tmp_path / "kept.zarr",
        episodes=6,
        max_steps=5,
        filter="state",
        state_rule=says_some,
    )
    assert report.kept == 3 and report.dropped == {"state": 3}
    with EpisodeStore.open(tmp_path / "kept.zarr", "r") as st:
        assert [m.tags["state_success"] for m in st.all_meta()] == [True] * 3
    with pytest.raises(ValueError, match="needs the task's success rule"):
        rollout_in_model(sure, vla, demos, episodes=2, max_steps=2, filter="state")
