"""VLA → ONNX: onnxruntime agrees with torch for the same noise (K Euler steps, guidance,
conditions and normalizers inside the graph), at any batch size; the metadata says what a
deploy side needs; the MSE head exports its mean."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from unilab.export.onnx_export import ExportError
from unilab.export.vla_metadata import VLA_KEY, VLAMetadata
from unilab.export.vla_onnx import (
    example_inputs,
    export_vla_onnx,
    onnx_feeds,
    run_onnx,
    vla_onnx_max_abs_diff,
)
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.policy import VLAPolicy

INPUTS = VLAInputs(
    proprio_dim=5, action_dim=3, cameras={"front": (16, 16), "wrist": (12, 20)}, vocab_size=9,
    pad_id=0, instruction_len=4,
)  # fmt: skip
VOCAB = ["<pad>", "pick", "the", "red", "cube", "place", "on", "blue", "plate"]


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def trained_looking(policy: VLAPolicy, seed: int = 0) -> VLAPolicy:
    """Random values in the zero-initialised parameters and non-trivial normalizers, so every
    part of the graph matters to the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            if p.abs().sum() == 0:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        policy.fit_normalizers(
            torch.randn(500, 5, generator=g) * 3 + 1, torch.randn(500, 3, generator=g) * 0.5 - 0.2
        )
    return policy.eval()


def small_config(**kw: object) -> VLAConfig:
    base: dict[str, object] = dict(
        horizon=4, num_steps=4, n_act=3, width=32, heads=2, prefix_layers=1, expert_layers=1,
        image_channels=[8, 16], image_tokens_side=2,
    )  # fmt: skip
    base.update(kw)
    return VLAConfig(**base)  # type: ignore[arg-type]


def test_flow_graph_matches_torch_for_fixed_noise(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = small_config(n_tokens=3, advantage=True, guidance_scale=1.7, flow_noise=True)
    policy = trained_looking(VLAPolicy(INPUTS, cfg))
    path = export_vla_onnx(policy, tmp_path / "vla.onnx", vocabulary=VOCAB, ensemble_decay=0.01)
    for batch, seed in ((1, 1), (64, 2)):
        probes = example_inputs(policy, batch, seed=seed)
        assert vla_onnx_max_abs_diff(path, policy, probes) <= 1e-4
    # The noise really is an input: another noise gives another chunk, in both runtimes.
    probes = example_inputs(policy, 8, seed=3)
    moved = {**probes, "noise": probes["noise"] + 1.0}
    a, b = run_onnx(path, onnx_feeds(policy, probes)), run_onnx(path, onnx_feeds(policy, moved))
    assert np.abs(a - b).max() > 1e-3
    assert vla_onnx_max_abs_diff(path, policy, moved) <= 1e-4

    meta = VLAMetadata.from_props(
        {p.key: p.value for p in onnx.load(str(path)).metadata_props}, str(path)
    )
    assert meta.head == "flow" and (meta.horizon, meta.num_steps, meta.n_act) == (4, 4, 3)
    assert meta.cameras == {"front": [16, 16], "wrist": [12, 20]}
    assert meta.vocabulary == VOCAB and meta.instruction_len == 4 and meta.pad_id == 0
    assert meta.inputs == [
        "policy", "image_front", "image_wrist", "instruction", "token", "advantage", "noise",
    ]  # fmt: skip
    assert meta.guidance_scale == 1.7 and meta.ensemble_decay == 0.01 and meta.n_tokens == 3


def test_mse_graph_matches_torch_and_has_no_noise_input(tmp_path: Path) -> None:
    torch.manual_seed(0)
    policy = trained_looking(VLAPolicy(INPUTS, small_config(), head="mse"))
    path = export_vla_onnx(policy, tmp_path / "mse.onnx")
    model = onnx.load(str(path))
    assert [i.name for i in model.graph.input][-1] == "instruction"
    assert vla_onnx_max_abs_diff(path, policy, example_inputs(policy, 16, seed=1)) <= 1e-4
    meta = VLAMetadata.from_json(next(p.value for p in model.metadata_props if p.key == VLA_KEY))
    assert meta.head == "mse" and meta.vocabulary == []


def test_vocabulary_must_match_the_model(tmp_path: Path) -> None:
    policy = VLAPolicy(INPUTS, small_config())
    with pytest.raises(ExportError, match="vocabulary has 2 words; the model's has 9"):
        export_vla_onnx(policy, tmp_path / "x.onnx", vocabulary=["a", "b"])
    with pytest.raises(ExportError, match="unknown exporter"):
        export_vla_onnx(policy, tmp_path / "x.onnx", exporter="tflite")


def test_token_selector_is_in_the_graph_and_deploy_lets_it_pick(tmp_path: Path) -> None:
    from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy

    torch.manual_seed(0)
    cfg = small_config(n_tokens=4, token_selector=True, token_dropout=0.0)
    policy = trained_looking(VLAPolicy(INPUTS, cfg))
    path = export_vla_onnx(policy, tmp_path / "sel.onnx", vocabulary=VOCAB)
    probes = example_inputs(policy, 32, seed=5)  # token values in -2 (select), -1 .. 3
    assert (probes["token"] == -2).any() and (probes["token"] >= 0).any()
    assert vla_onnx_max_abs_diff(path, policy, probes) <= 1e-4
    # The selector's choice is what an explicit token would give: the same chunk.
    obs = {k: v for k, v in probes.items() if k not in ("token", "noise")}
    chosen = policy.select_tokens(obs)
    with torch.no_grad():
        picked = policy(obs, probes["noise"])  # no token: the selector picks
        explicit = policy({**obs, "token": chosen}, probes["noise"])
    torch.testing.assert_close(picked, explicit)
    # Deploy without a token feeds -2: onnxruntime picks with the selector, as torch does.
    onnx_policy = OnnxVLAPolicy(path)
    assert onnx_policy.metadata.token_selector
    plan = onnx_policy.plan({k: v.numpy() for k, v in obs.items()}, probes["noise"].numpy())
    np.testing.assert_allclose(plan, picked.numpy(), atol=1e-4)


def test_selector_token_is_held_per_episode_by_torch_and_onnx_executors(tmp_path: Path) -> None:
    from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy

    torch.manual_seed(0)
    cfg = small_config(n_tokens=4, token_selector=True, token_dropout=0.0)
    policy = trained_looking(VLAPolicy(INPUTS, cfg))
    path = export_vla_onnx(policy, tmp_path / "hold.onnx", vocabulary=VOCAB)
    onnx_policy = OnnxVLAPolicy(path)
    assert onnx_policy.metadata.selector_holds_token
    # The graph reports the token each row ran under: the selector's pick where it was -2.
    probes = example_inputs(policy, 32, seed=5)
    obs = {k: v for k, v in probes.items() if k not in ("token", "noise")}
    chosen = policy.select_tokens(obs).numpy()
    (reported,) = onnx_policy.session.run(["selected_token"], onnx_feeds(policy, probes))
    given = probes["token"].numpy()
    np.testing.assert_array_equal(reported, np.where(given == -2, chosen, given))
    np_obs = {k: v.numpy() for k, v in obs.items()}
    np.testing.assert_array_equal(onnx_policy.choose_tokens(np_obs), chosen)
    np.testing.assert_array_equal(policy.choose_tokens(np_obs), chosen)
    # An episode of 4 envs whose states make the selector change its mind: both executors
    # keep each env's first choice, and agree on the actions.
    first = {k: v[:4] for k, v in np_obs.items()}
    later = {k: v[4:8] for k, v in np_obs.items()}
    changes = chosen[:4] != chosen[4:8]
    assert changes.any(), "probes where the selector's choice changes"
    steps = (first, later, later)
    torch_ex = policy.executor(4, seed=3, n_act=1)
    onnx_ex = onnx_policy.executor(4, seed=3, n_act=1)
    explicit = policy.executor(4, seed=3, n_act=1)
    per_chunk = policy.executor(4, seed=3, n_act=1, hold_token=False)
    for step_obs in steps:
        held = torch_ex(step_obs)
        np.testing.assert_allclose(held, onnx_ex(step_obs), atol=1e-4)
        # what the hold feeds is what explicit first-choice tokens give
        np.testing.assert_allclose(held, explicit({**step_obs, "token": chosen[:4]}), atol=1e-6)
        reselected = per_chunk(step_obs)
    np.testing.assert_array_equal(torch_ex.held, chosen[:4])
    np.testing.assert_array_equal(onnx_ex.held, chosen[:4])
    # Re-selecting at every chunk runs other tokens where the choice changed.
    moved = np.abs(reselected - held).max(axis=1) > 1e-4
    np.testing.assert_array_equal(moved, changes)
