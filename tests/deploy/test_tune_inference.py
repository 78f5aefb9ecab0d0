"""`unilab tune-inference`: the bandit loop over real episodes picks the setting that works,
leaves out settings a policy cannot use (with a note), and its choice lands in the export's
metadata, which the torch-free runner and deploy execute."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from vla_run_helpers import vla_run

from unilab.cli import main
from unilab.deploy.policy_source import LoadedPolicy, load_policy
from unilab.deploy.sim_task import configs_for_policy
from unilab.deploy.tune_inference import (
    TuneError,
    parse_space,
    settings_of,
    tune_inference,
    usable_space,
)
from unilab.deploy.vla_deploy import VLAStepPolicy
from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy
from unilab.export.onnx_export import ExportError
from unilab.export.run_export import export_run
from unilab.export.vla_metadata import VLAMetadata
from unilab.policies.vla.chunking import ChunkExecutor
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.policy import VLAPolicy
from unilab.runtime.policy import ActionChunk

pytestmark = pytest.mark.usefixtures("torch_one_thread")


class HeldChunks:
    """The trained cart-pole controller as a chunked policy: each chunk of H holds the
    action planned from the chunk's first observation (zero-order hold). Re-planning every
    2 steps balances the pole; executing 8 or 16 held actions lets it fall (measured: 8/8
    successes at n_act <= 4, 0/8 at n_act 8 and 16)."""

    def __init__(self, policy, horizon: int = 16) -> None:
        self.policy = policy
        self.action_horizon = horizon

    @property
    def obs_groups(self):
        return self.policy.obs_groups

    @property
    def action_dim(self) -> int:
        return self.policy.action_dim

    def act(self, obs, deterministic=False):
        return ActionChunk(self.act_inference(obs))  # deterministic: no noise to draw

    def act_inference(self, obs):
        return self.plan(obs, None)

    def plan(self, obs, noise):
        action = self.policy.act_inference(obs)[:, 0]
        return np.repeat(action[:, None], self.action_horizon, axis=1)

    def executor(self, num_envs, seed=0, n_act=None, ensemble_decay=None):
        return ChunkExecutor(
            self.plan, num_envs, self.action_horizon, self.action_dim,
            n_act or self.action_horizon, ensemble_decay, seed,
        )  # fmt: skip


def test_the_tuner_picks_the_n_act_that_balances(trained_run: Path) -> None:
    loaded = load_policy(trained_run)
    held = LoadedPolicy(HeldChunks(loaded.policy), loaded.metadata, loaded.source)
    task_cfg, sim_cfg = configs_for_policy(
        loaded.metadata.task_config, loaded.metadata.sim_config, []
    )
    report = tune_inference(
        held,
        task_cfg,
        sim_cfg,
        space={"n_act": [16, 8, 2, 32], "noise_temperature": [0.5, 1.0]},
        rounds=6,
        episodes_per_round=6,
        seed=3,
        decay=0.9,
        compare_seeds=2,
    )
    assert report["chosen"] == {"n_act": 2}
    assert report["defaults"] == {"n_act": 16}  # the policy's own: all of each chunk
    assert report["space"] == {"n_act": [16, 8, 2]}
    assert "[32]" in report["skipped"]["n_act"]  # above the horizon, said so
    assert "noise_temperature" in report["skipped"]["noise_temperature"]
    for row in report["rounds"]:  # the outcome really depends on n_act
        assert row["successes"] == (row["episodes"] if row["settings"]["n_act"] == 2 else 0)
    means = report["means"]["n_act"]
    assert means[2] == max(means) and means[2] > 0.5
    cmp = report["comparison"]
    assert cmp["seeds"] == [100003, 100004] and set(cmp["seeds"]).isdisjoint(
        r["seed"] for r in report["rounds"]
    )
    assert cmp["defaults"]["episodes"] == cmp["chosen"]["episodes"] == 12
    assert cmp["chosen"]["success_rate"] == 1.0 and cmp["defaults"]["success_rate"] == 0.0
    assert cmp["difference"] == 1.0
    assert report["recommended"] == {"n_act": 2} and "beat the defaults" in report["recommendation"]
    json.dumps(report)  # plain JSON


def test_a_policy_without_chunks_has_nothing_to_tune(
    trained_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(TuneError, match="executes no chunks"):
        usable_space(load_policy(trained_run).policy, {"n_act": [1, 2]})
    assert main(["tune-inference", str(trained_run), "--rounds", "1"]) == 2
    assert "GaussianActor executes no chunks" in capsys.readouterr().err


def test_space_parsing_and_settings_files() -> None:
    assert parse_space(["n_act=2,4", "ensemble_decay=none,0.01", "guidance_scale=1,2.5"]) == {
        "n_act": [2, 4],
        "ensemble_decay": [None, 0.01],
        "guidance_scale": [1, 2.5],
    }
    with pytest.raises(TuneError, match="unknown setting 'temperature'"):
        parse_space(["temperature=1"])
    with pytest.raises(TuneError, match="NAME=V1,V2"):
        parse_space(["n_act"])
    report = {"schema": "unilab.tune_inference/1", "chosen": {"n_act": 2}}
    assert settings_of(report) == {"n_act": 2}
    assert settings_of({"best_of_n": 4}) == {"best_of_n": 4}
    with pytest.raises(TuneError, match="unknown inference settings"):
        settings_of({"n_act": 2, "speed": 3})


def test_noise_temperature_scales_the_executors_noise() -> None:
    seen: list[np.ndarray] = []

    def plan(obs, noise):
        seen.append(noise.copy())
        return np.zeros((noise.shape[0], 4, 2), np.float32)

    obs = {"policy": np.zeros((3, 1), np.float32)}
    for temperature in (1.0, 0.5, 0.0):
        ChunkExecutor(plan, 3, 4, 2, n_act=2, seed=7, noise_temperature=temperature)(obs)
    np.testing.assert_allclose(seen[1], 0.5 * seen[0], rtol=1e-6)
    assert np.all(seen[2] == 0.0) and np.std(seen[0]) > 0.5
    with pytest.raises(ValueError, match="noise_temperature"):
        ChunkExecutor(plan, 3, 4, 2, n_act=2, noise_temperature=-1.0)


def _value_vla(tokens: int) -> VLAPolicy:
    torch.manual_seed(0)
    inputs = VLAInputs(proprio_dim=4, action_dim=2)
    cfg = VLAConfig(
        horizon=4, num_steps=2, n_act=2, width=32, heads=2, prefix_layers=1, expert_layers=1,
        n_tokens=tokens, value_heads=True,
    )  # fmt: skip
    policy = VLAPolicy(inputs, cfg)
    with torch.no_grad():
        for p in policy.parameters():
            p.normal_(0.0, 0.5)
    return policy.eval()


def test_best_of_n_keeps_the_candidate_the_value_heads_rank_highest() -> None:
    policy = _value_vla(tokens=3)
    rows = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    obs = {"policy": 3.0 * rows}
    noise = np.random.default_rng(1).standard_normal((16, 4, 2)).astype(np.float32)
    chosen = policy.planner(best_of_n=3, seed=9)(obs, noise)
    # by hand: candidate j under token j, noise 0 given, the others from the planner's stream
    extra = np.random.default_rng([9, 0x0B0F]).standard_normal((2, 16, 4, 2), dtype=np.float32)
    noises = [noise, extra[0], extra[1]]
    scores, chunks = [], []
    for j in range(3):
        tensors = {"policy": torch.from_numpy(obs["policy"]), "token": torch.full((16,), j)}
        values = policy.predict_values(tensors)
        scores.append(values["success"].detach().numpy())
        chunks.append(policy.planner()({**obs, "token": np.full(16, j)}, noises[j]))
    best = np.argmax(np.stack(scores), axis=0)
    assert len(set(best.tolist())) > 1  # the heads prefer different tokens per state
    expected = np.stack([chunks[b][i] for i, b in enumerate(best)])
    np.testing.assert_allclose(chosen, expected, atol=1e-5)
    with pytest.raises(ValueError, match="needs behaviour tokens"):
        _value_vla(tokens=0).planner(best_of_n=2)


def test_tune_write_export_metadata_and_deploy_read_the_choice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = vla_run(tmp_path / "runs", "algo.model.value_heads=true", "algo.tokens=2")
    out = tmp_path / "tune.json"
    argv = [
        "tune-inference", str(run), "--rounds", "2", "--episodes-per-round", "2",
        "--compare-seeds", "1", "--space", "n_act=2", "noise_temperature=0.5",
        "best_of_n=2", "guidance_scale=1,2", "--write", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["chosen"] == {"n_act": 2, "noise_temperature": 0.5, "best_of_n": 2}
    # one progress line per round and per comparison arm, as they finish
    err = capsys.readouterr().err.splitlines()
    progress = [ln.split(":")[1].strip() for ln in err if ln.startswith("tune-inference: ")]
    assert progress[:4] == ["round 1/2", "round 2/2", "compare defaults", "compare chosen"]
    assert any(
        ln.startswith("tune-inference: compare chosen: n_act=2 noise_temperature=0.5")
        and ln.endswith("/2 successes")
        for ln in err
    )
    assert report["defaults"] == {"n_act": 4, "noise_temperature": 1.0, "best_of_n": 1}
    assert "condition to drop" in report["skipped"]["guidance_scale"]
    assert report["comparison"]["chosen"]["episodes"] == 2
    # --write exports the recommendation: this untrained policy never succeeds, so the
    # choice did not beat the defaults and the export keeps them
    cmp = report["comparison"]
    assert cmp["chosen"]["success_rate"] == cmp["defaults"]["success_rate"] == 0.0
    assert report["recommended"] == report["defaults"]
    assert "keep the defaults" in report["recommendation"]
    vla = json.loads((run / "export" / "metadata.json").read_text())["vla"]
    assert (vla["n_act"], vla["noise_temperature"], vla["best_of_n"]) == (4, 1.0, 1)
    assert settings_of(report) == report["defaults"]  # what export / improve read
    # the choice itself, given as a plain object, lands in the export; the torch-free
    # runner and deploy execute it
    chosen = tmp_path / "chosen.json"
    chosen.write_text(json.dumps(report["chosen"]))
    assert main(["export", str(run), "--inference-settings", str(chosen)]) == 0
    vla = json.loads((run / "export" / "metadata.json").read_text())["vla"]
    assert (vla["n_act"], vla["noise_temperature"], vla["best_of_n"]) == (2, 0.5, 2)
    runner = OnnxVLAPolicy(run / "export" / "policy.onnx")
    assert (runner.metadata.n_act, runner.metadata.noise_temperature) == (2, 0.5)
    executor = runner.executor(num_envs=1)
    assert (executor.n_act, executor.noise_temperature) == (2, 0.5)
    assert any("best_of_n=2" in note for note in runner.notes)
    step = VLAStepPolicy(runner, seed=0)
    assert (step.executor.n_act, step.executor.noise_temperature) == (2, 0.5)
    # the ONNX graph: guidance and best-of-N are not tunable there, said so
    onnx_policy = load_policy(run / "export" / "policy.onnx").policy
    _, skipped = usable_space(
        onnx_policy, {"n_act": [2], "guidance_scale": [2.0], "best_of_n": [2]}
    )
    assert "compiled into the ONNX graph" in skipped["guidance_scale"]
    assert "no value heads" in skipped["best_of_n"]
    # `unilab export --inference-settings` writes the same from a report; old files read as 1.0
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"n_act": 3, "noise_temperature": 0.75}))
    assert main(["export", str(run), "--inference-settings", str(settings)]) == 0
    meta = OnnxVLAPolicy(run / "export" / "policy.onnx").metadata
    assert (meta.n_act, meta.noise_temperature, meta.best_of_n) == (3, 0.75, 1)
    old = {
        k: v
        for k, v in json.loads(meta.to_json()).items()
        if k not in ("noise_temperature", "best_of_n")
    }
    assert VLAMetadata.from_json(json.dumps(old)).noise_temperature == 1.0
    settings.write_text(json.dumps({"n_act": 99}))
    with pytest.raises(ExportError, match=r"n_act=99 must be in \[1, 8\]"):
        export_run(run, inference_settings={"n_act": 99})
    assert OnnxVLAPolicy(run / "export" / "policy.onnx").metadata.n_act == 3  # kept
