"""Value heads on the VLA: output shapes and ranges, failed episodes' progress and time to
go really masked out of the loss, the switch (default off: the network is unchanged), and
a success head that learns a function of the proprioception far better than a constant."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

from unilab.algos.value_calibration import brier_score
from unilab.export.vla_onnx import example_inputs, export_vla_onnx, vla_onnx_max_abs_diff
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.policy import VLAPolicy
from unilab.policies.vla.prefix import Prefix
from unilab.policies.vla.value_heads import ValueHeads, ValueTargets

W = 16


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def prefix(n: int, seed: int = 0, requires_grad: bool = False) -> Prefix:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randn(n, 5, W, generator=g).requires_grad_(requires_grad)
    valid = torch.ones(n, 5, dtype=torch.bool)
    valid[:, -2:] = False  # padding tokens, as instruction padding
    return Prefix(tokens, valid, None)


def targets(success: list[float], progress: list[float], ttg: list[float]) -> ValueTargets:
    s = torch.tensor(success, dtype=torch.float32)
    return ValueTargets(
        s, torch.tensor(progress, dtype=torch.float32), torch.tensor(ttg, dtype=torch.float32), s
    )


def small_policy(**kw: object) -> VLAPolicy:
    cfg = VLAConfig(
        horizon=2, num_steps=2, n_act=1, width=32, heads=2, prefix_layers=1, expert_layers=1,
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    return VLAPolicy(VLAInputs(proprio_dim=3, action_dim=2), cfg)


def test_predictions_have_one_value_per_frame_in_range() -> None:
    heads = ValueHeads(W)
    heads.time_scale.fill_(4.0)
    with torch.no_grad():
        out = heads.predict(prefix(7))
    assert set(out) == {"success", "success_logit", "progress", "time_to_go"}
    for v in out.values():
        assert v.shape == (7,)
    assert float(out["success"].min()) > 0 and float(out["success"].max()) < 1
    assert torch.allclose(out["success"], torch.sigmoid(out["success_logit"]))  # identity
    heads.set_success_calibration(0.5, -1.0)
    with torch.no_grad():
        scaled = heads.predict(prefix(7))
    assert torch.equal(scaled["success_logit"], out["success_logit"])
    assert torch.allclose(scaled["success"], torch.sigmoid(0.5 * out["success_logit"] - 1.0))
    assert float(out["progress"].min()) > 0 and float(out["progress"].max()) < 1
    assert float(out["time_to_go"].min()) >= 0
    # Padding tokens are not pooled: changing them changes nothing.
    p = prefix(7)
    p2 = Prefix(p.tokens.clone(), p.valid, None)
    p2.tokens[:, -2:] = 100.0
    with torch.no_grad():
        torch.testing.assert_close(heads.predict(p2)["progress"], heads.predict(p)["progress"])


def test_failed_frames_do_not_enter_progress_or_time_losses() -> None:
    torch.manual_seed(0)
    heads = ValueHeads(W)
    # Frames 0, 1 from a successful episode, 2, 3 from a failed one.
    base = targets([1, 1, 0, 0], [0.5, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0])
    other = targets([1, 1, 0, 0], [0.5, 1.0, 0.9, 0.1], [1.0, 0.0, 7.0, 3.0])
    other.has_progress = base.has_progress
    with torch.no_grad():
        a, b = heads.loss(prefix(4), base), heads.loss(prefix(4), other)
        c = heads.loss(prefix(4), targets([1, 1, 0, 0], [0.1, 0.2, 0, 0], [9.0, 4.0, 0, 0]))
    for k in ("progress_loss", "ttg_loss", "success_loss"):
        torch.testing.assert_close(a[k], b[k])
    # ...while the same change on the successful frames does change them.
    assert float(c["progress_loss"]) != float(a["progress_loss"])
    assert float(c["ttg_loss"]) != float(a["ttg_loss"])
    # No gradient reaches the failed frames' tokens from the progress and time terms.
    p = prefix(4, requires_grad=True)
    terms = heads.loss(p, base)
    (terms["progress_loss"] + terms["ttg_loss"]).backward()
    assert p.tokens.grad is not None
    assert float(p.tokens.grad[2:].abs().sum()) == 0.0
    assert float(p.tokens.grad[:2].abs().sum()) > 0.0
    # A batch of failed frames only: zero, and still differentiable.
    none = heads.loss(prefix(2), targets([0, 0], [0, 0], [0, 0]))
    assert none["progress_loss"].item() == 0.0 and none["progress_loss"].requires_grad


def test_time_scale_is_the_mean_defined_time_to_go() -> None:
    heads = ValueHeads(W)
    heads.fit_time_scale(torch.tensor([2.0, 4.0, 100.0]), torch.tensor([1.0, 1.0, 0.0]))
    assert float(heads.time_scale) == pytest.approx(3.0)
    heads.fit_time_scale(torch.tensor([5.0]), torch.tensor([0.0]))  # nothing defined: kept
    assert float(heads.time_scale) == pytest.approx(3.0)


def test_switch_is_off_by_default_and_errors_name_it() -> None:
    plain = small_policy()
    assert plain.value_heads is None
    assert not any(k.startswith("value_heads") for k in plain.state_dict())
    obs = {"policy": torch.randn(3, 3)}
    with pytest.raises(ValueError, match="value_heads=True"):
        plain.predict_values(obs)
    with_heads = small_policy(value_heads=True)
    values = with_heads.predict_values(obs)
    assert {k: tuple(v.shape) for k, v in values.items()} == {
        "success": (3,), "success_logit": (3,), "progress": (3,), "time_to_go": (3,)
    }  # fmt: skip
    loss, metrics = with_heads.loss(
        obs,
        torch.randn(3, 2, 2),
        value_targets=targets([1, 0, 1], [0.5, 0, 1], [2, 0, 0]),
        value_weight=0.1,
    )
    assert {"flow_loss", "success_loss", "progress_loss", "ttg_loss"} <= set(metrics)
    aux = metrics["success_loss"] + metrics["progress_loss"] + metrics["ttg_loss"]
    # Same seed for the flow noise and time: the total is the flow loss + 0.1 x the terms.
    torch.testing.assert_close(loss.detach(), metrics["flow_loss"] + 0.1 * aux)


def test_success_head_learns_a_function_of_proprioception() -> None:
    torch.manual_seed(0)
    policy = small_policy(value_heads=True)
    g = torch.Generator().manual_seed(1)

    def batch(n: int) -> tuple[dict[str, torch.Tensor], ValueTargets]:
        x = torch.randn(n, 3, generator=g)
        success = (x[:, 0] + 0.5 * x[:, 1] > 0).float()  # the outcome the state decides
        progress = torch.sigmoid(x[:, 2]) * success
        return {"policy": x}, ValueTargets(success, progress, 3 * progress, success)

    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    policy.train()
    for _ in range(300):
        obs, tgt = batch(64)
        loss, _ = policy.loss(obs, torch.zeros(64, 2, 2), value_targets=tgt, value_weight=1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    policy.eval()
    obs, tgt = batch(2000)
    pred = policy.predict_values(obs)
    brier = brier_score(pred["success"].numpy(), tgt.success.numpy())
    rate = float(tgt.success.mean())
    constant = brier_score(torch.full((2000,), rate).numpy(), tgt.success.numpy())
    assert constant == pytest.approx(0.25, abs=0.01)
    assert brier < 0.3 * constant, (brier, constant)


def test_export_traces_the_action_path_only(tmp_path: Path) -> None:
    torch.manual_seed(0)
    policy = small_policy(value_heads=True).eval()
    path = export_vla_onnx(policy, tmp_path / "vla.onnx")
    graph = onnx.load(str(path)).graph
    assert [o.name for o in graph.output] == ["actions"]
    assert not any("value_heads" in init.name for init in graph.initializer)
    assert vla_onnx_max_abs_diff(path, policy, example_inputs(policy, 4, seed=1)) <= 1e-4
