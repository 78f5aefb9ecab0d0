"""`unilab wm loop` end to end on a tiny setup: a bc_flow VLA and a one-step world model on
expert demos, one round of real rollouts -> world-model fine-tuning from the previous model
-> synthetic origin=wm rollouts -> awr_flow on real + synthetic with the synthetic share
pinned -> evaluation; the share schedule; inputs refused before anything starts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from unilab.bench.expert_demos import write_expert_store
from unilab.cli import main
from unilab.config import compose
from unilab.data.schema import ORIGINS
from unilab.data.store import EpisodeStore
from unilab.data.validate import validate
from unilab.workflows.wm_loop import capped_shares
from unilab.worldmodel.fidelity import load_world_model

TASK = ["task=arm_move_side", "task.cameras=[front]", "task.image_size=32"]
COMMON = [
    "runtime.learner_threads=1",
    "run.quiet=true",
    "logging.tensorboard=false",
    "eval.every=0",
    "viz.rerun=false",
    "run.export=false",
]
SMALL_WM = [
    "algo.batch_size=16",
    "algo.channels=[8,16]",
    "algo.latent_dim=16",
    "algo.dynamics_width=32",
    "algo.dynamics_layers=1",
    "algo.horizon=1",
    "algo.warmup_steps=2",
    "algo.val_every=20",
]
TINY_VLA = [
    "algo.batch_size=8",
    "algo.warmup_steps=2",
    "algo.model.width=32",
    "algo.model.heads=2",
    "algo.model.image_channels=[8,16]",
    "algo.model.image_tokens_side=2",
    "algo.model.horizon=4",
    "algo.model.n_act=2",
    "algo.model.num_steps=2",
    "algo.model.prefix_layers=1",
    "algo.model.expert_layers=1",
    "algo.val_every=4",
    "run.play_episodes=0",
    "task.episode_length_s=1.5",  # 30 control steps: short rollouts and evaluations
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("wm_loop")
    demos = root / "demos.zarr"
    write_expert_store(demos, "arm_move_side", 4, overrides=TASK[1:], seed=0)
    base = [*TASK, *COMMON, f"data.store={demos}"]
    wm_args = ["wm", "train", *base, *SMALL_WM, "algo.steps=20", f"run.out_dir={root / 'wm'}"]
    assert main(wm_args) == 0
    vla_args = ["train", *base, *TINY_VLA, "algo=bc_flow", "algo.steps=4"]
    assert main([*vla_args, f"run.out_dir={root / 'vla'}"]) == 0
    (wm,) = list((root / "wm" / "arm_move_side" / "world_model").iterdir())
    (vla,) = list((root / "vla" / "arm_move_side" / "bc_flow").iterdir())
    return demos, wm, vla


def test_one_round_end_to_end(runs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, wm, vla = runs
    out = tmp_path / "loop"
    t0 = time.perf_counter()
    args = ["wm", "loop", str(vla), "--world-model", str(wm), "--rounds", "1"]
    args += ["--episodes", "2", "--eval-episodes", "2", "--synthetic", "3", "--max-steps", "12"]
    args += ["--wm-steps", "3", "--wm-share", "0.25", "--max-drift", "1e9", "--out", str(out)]
    args += ["--synthetic-keep", "all"]
    args += ["--wm-set", "algo.val_every=3", "algo.steps=3", "algo.batch_size=8"]
    assert main(args) == 0
    assert time.perf_counter() - t0 < 120  # ~30 s on a quiet box; room for a loaded one
    report = json.loads((out / "wm_loop.json").read_text())
    (summary,) = report["rounds"]
    assert summary == json.loads((out / "round_1" / "round.json").read_text())
    assert 0.0 <= summary["eval"]["success_rate"] <= 1.0 and summary["eval"]["episodes"] == 2
    assert 0.0 <= report["baseline"]["eval"]["success_rate"] <= 1.0

    # the real store: the demos plus the round's sim rollouts; never a synthetic frame
    recorded = summary["rollouts"]["recorded_episodes"]
    assert recorded >= 2
    with EpisodeStore.open(out / "real.zarr", "r") as real:
        assert len(real) == 4 + recorded
        assert set(real.read("origin").tolist()) == {ORIGINS.index("sim")}

    # the world model: fine-tuned from the start model on the real store; its normalizers
    # are the init's (a fresh fit on demos + rollouts would move them)
    wm_run = Path(summary["world_model"]["run"])
    cfg = yaml.safe_load((wm_run / "config.yaml").read_text())
    assert cfg["algo"]["init"] == str(wm) and cfg["algo"]["horizon"] == 1
    assert cfg["data"]["store"] == str(out / "real.zarr") and cfg["algo"]["steps"] == 3
    assert cfg["algo"]["channels"] == [8, 16]  # the init's model settings
    start, tuned = load_world_model(wm).model, load_world_model(wm_run).model
    assert torch.equal(start.proprio_norm.mean, tuned.proprio_norm.mean)
    assert torch.equal(start.action_norm.std, tuned.action_norm.std)
    assert not torch.equal(start.head.weight, tuned.head.weight)  # it did train

    # the synthetic episodes: origin wm, valid, all in the round's training store
    synth = summary["synthetic"]
    assert synth["generated"] == 3 and synth["kept"] == synth["appended_episodes"] >= 1
    assert validate(synth["store"], deep=True) == []
    with EpisodeStore.open(synth["store"], "r") as st:
        assert set(st.read("origin").tolist()) == {ORIGINS.index("wm")}
        assert all(m.tags["world_model"]["run"] == str(wm_run) for m in st.all_meta())
    frames = summary["store_frames"]
    assert frames["episodes"] == 4 + recorded + synth["kept"]
    assert frames["by_origin"]["wm"] == synth["frames"]
    assert set(frames["by_source"]) == {"expert", "sim", "wm"}

    # the policy: awr_flow from the bc_flow run on real + synthetic, the wm share pinned at
    # the synthetic frames' share, capped at --wm-share
    share = min(0.25, frames["by_source"]["wm"] / frames["total"])
    assert summary["shares"]["wm"] == pytest.approx(share)
    assert sum(summary["shares"].values()) == pytest.approx(1.0)
    assert summary["advantages"]["share_wm"] == pytest.approx(share)
    run_cfg = yaml.safe_load((Path(summary["run"]) / "config.yaml").read_text())
    assert run_cfg["algo"]["name"] == "awr_flow" and run_cfg["algo"]["init"] == str(vla)
    assert run_cfg["data"]["store"] == str(out / "round_1" / "train.zarr")


def test_real_shares_follow_awr_flows_schedule_with_wm_pinned() -> None:
    algo = compose(["algo=awr_flow"]).algo
    for iteration in (0, 3):
        real = capped_shares(algo, ["expert", "sim"], iteration, 0.3)
        mixed = capped_shares(algo, ["expert", "sim", "wm"], iteration, 0.3)
        assert mixed["wm"] == pytest.approx(0.3) and sum(mixed.values()) == pytest.approx(1)
        for source in ("expert", "sim"):
            assert mixed[source] == pytest.approx(0.7 * real[source])
    # the schedule moves the demos' share toward its floor, as awr_flow's does
    first, later = (
        capped_shares(algo, ["expert", "sim"], 0, 0.3),
        capped_shares(algo, ["expert", "sim"], 3, 0.3),
    )
    assert first["expert"] == pytest.approx(0.5) and later["expert"] < first["expert"]
    assert np.isclose(sum(later.values()), 1.0)


def test_bad_inputs_are_refused_before_anything_starts(
    runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, wm, vla = runs
    out = tmp_path / "nothing"
    base = ["wm", "loop", str(vla), "--out", str(out)]
    assert main([*base, "--world-model", str(tmp_path / "missing")]) == 2
    assert main([*base, "--world-model", str(vla)]) == 2  # a policy run, not a world model
    assert main([*base, "--world-model", str(wm), "--wm-share", "1.0"]) == 2
    assert main([*base, "--synthetic", "4"]) == 2  # synthetic rollouts need a world model
    assert main([*base, "--world-model", str(wm), "--synthetic", "-1"]) == 2
    assert main([*base, "--world-model", str(wm), "--filter", "state"]) == 2  # images only
    assert main(["wm", "loop", str(wm), "--world-model", str(wm), "--out", str(out)]) == 2
    assert not out.exists()


def test_synthetic_zero_is_the_real_only_control(
    runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    from unilab.config.errors import ConfigError
    from unilab.workflows.wm_loop import wm_loop

    _, _, vla = runs
    with pytest.raises(ConfigError, match="needs a world model"):
        wm_loop(vla, None, rounds=1, episodes=2, synthetic=3, out=tmp_path / "no")
    assert not (tmp_path / "no").exists()
    out = tmp_path / "control"
    report = wm_loop(
        vla,
        None,
        rounds=1,
        episodes=2,
        synthetic=0,
        max_steps=12,
        out=out,
        eval_episodes=2,
        overrides=["algo.steps=3", "algo.batch_size=8", "algo.val_every=3"],
        log=lambda _: None,
    )
    (summary,) = report["rounds"]
    assert report["world_model"] is None and report["synthetic_per_round"] == 0
    assert summary["world_model"] is None and summary["synthetic"] is None
    assert (
        not (out / "round_1" / "wm").exists() and not (out / "round_1" / "synthetic.zarr").exists()
    )
    # the same real rollouts and training as the synthetic arm, without a wm source
    assert set(summary["shares"]) == {"expert", "sim"}
    assert sum(summary["shares"].values()) == pytest.approx(1.0)
    assert "wm" not in summary["store_frames"]["by_origin"]
    recorded = summary["rollouts"]["recorded_episodes"]
    assert summary["store_frames"]["episodes"] == 4 + recorded
    assert 0.0 <= summary["eval"]["success_rate"] <= 1.0
