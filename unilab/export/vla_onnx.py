"""VLA → ONNX: the whole deterministic chunk in one graph.

Inputs (batch axis symbolic): `policy` float32 (N, d), `image_<cam>` uint8 (N, H, W, 3),
`instruction` int64 (N, L), `token` / `advantage` int64 (N,) when the model has them
(-1 = null), and for the flow head `noise` float32 (N, H, A), the initial noise at t = 1.
Output `actions` float32 (N, H, A) in task units; a model with a token selector adds output
`selected_token` int64 (N,), the token each row ran under (the selector's pick where the
input was -2), which the runner holds for the rest of an episode. The flow head's graph holds the prefix
encoder once and K unrolled action-expert steps (the prefix keys/values computed once),
guidance included when the model is configured with it, action normalization included; so
onnxruntime and torch agree for the same noise. The default exporter is torch's
TorchScript-based one (opset 17; `EXPORTERS` says why), not the `torch.export` path the MLP
policies use (docs/decisions/0007-export-format.md, 0041-vla-architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from unilab.export.metadata import PolicyMetadata
from unilab.export.onnx_export import OPSET, ExportError, _quiet_exporter
from unilab.export.vla_metadata import (
    ACTIONS_OUTPUT,
    NOISE_INPUT,
    TOKEN_OUTPUT,
    VLA_KEY,
    VLAMetadata,
    input_name,
)
from unilab.policies.vla.policy import VLAPolicy
from unilab.policies.vla.tokens import SELECT_TOKEN

TOLERANCE = 1e-3
"""Largest |onnxruntime - torch| (action units) `export_checked` accepts on its probes. The
tests hold their networks to 1e-4; a trained flow policy integrates K steps through a
transformer, and float32 kernels that round differently then drift apart on the odd probe:
an awr_flow policy (stop 38) differed by 5e-6 at the 99.9th percentile of its 5,120 probed
numbers and by 1.2e-4 at the worst, which failed its export. 1e-3 is 0.05 % of the action
range, below anything the controller resolves."""
EXPORTERS = {"torchscript": 17, "dynamo": OPSET}
"""Exporter -> opset. torch's TorchScript-based exporter writes the unrolled K-step graph in
seconds; the `torch.export`-based one (used for the MLP policies) took minutes for the same
graph here (docs/decisions/0041-vla-architecture.md), so it is opt-in until it is faster.
Both give graphs that agree with torch within 1e-6."""


def _export(
    graph: nn.Module,
    args: tuple[torch.Tensor, ...],
    path: Path,
    names: list[str],
    exporter: str,
    opset: int | None = None,
    outputs: Sequence[str] = (ACTIONS_OUTPUT,),
) -> None:
    opset = EXPORTERS[exporter] if opset is None else opset
    if exporter == "dynamo":
        batch = torch.export.Dim("batch")
        torch.onnx.export(
            graph,
            args,
            str(path),
            input_names=names,
            output_names=list(outputs),
            opset_version=opset,
            dynamo=True,
            dynamic_shapes=(tuple({0: batch} for _ in args),),  # one entry: *tensors
            external_data=False,
            verbose=False,
        )
        return
    torch.onnx.export(
        graph,
        args,
        str(path),
        input_names=names,
        output_names=list(outputs),
        opset_version=opset,
        dynamo=False,
        dynamic_axes={n: {0: "batch"} for n in [*names, *outputs]},
    )


def graph_keys(policy: VLAPolicy) -> list[str]:
    """Observation keys in the order of the graph's inputs (before `noise`)."""
    return [*policy.inputs.obs_keys, *policy.condition_names]


def graph_outputs(policy: VLAPolicy) -> list[str]:
    """The graph's outputs: `actions`, and `token` when the model has a token selector."""
    has_token = policy.selector is not None and "token" in policy.condition_names
    return [ACTIONS_OUTPUT, TOKEN_OUTPUT] if has_token else [ACTIONS_OUTPUT]


class _ChunkGraph(nn.Module):
    """Positional inputs -> `policy(obs, noise)`: what the exporter traces."""

    def __init__(self, policy: VLAPolicy, keys: Sequence[str]) -> None:
        super().__init__()
        self.policy = policy
        self.keys = list(keys)
        self.with_noise = policy.head == "flow"
        self.with_token = len(graph_outputs(policy)) == 2

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        obs = dict(zip(self.keys, tensors[: len(self.keys)], strict=True))
        noise = tensors[-1] if self.with_noise else torch.zeros(())
        if not self.with_token:
            return self.policy(obs, noise)
        # Resolve -2 here (what the policy would do inside) so the graph can report it.
        given = obs["token"].reshape(-1).to(torch.int64)
        token = torch.where(given == SELECT_TOKEN, self.policy.select_tokens(obs), given)
        return self.policy({**obs, "token": token}, noise), token


def example_inputs(policy: VLAPolicy, batch: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random observations of the right shapes and dtypes, plus noise (flow head)."""
    gen = torch.Generator().manual_seed(seed)
    spec = policy.inputs
    out: dict[str, torch.Tensor] = {}
    if spec.proprio_dim:
        out["policy"] = torch.randn(batch, spec.proprio_dim, generator=gen)
    for cam, (h, w) in spec.cameras.items():
        out[f"images/{cam}"] = torch.randint(0, 256, (batch, h, w, 3), generator=gen).to(
            torch.uint8
        )
    if spec.vocab_size:
        out["instruction"] = torch.randint(
            0, spec.vocab_size, (batch, spec.instruction_len), generator=gen
        )
    for name, cond in policy.prefix.conditions.items():
        low = -2 if name == "token" and policy.selector is not None else -1  # -2: selector
        out[name] = torch.randint(low, cond.num_values, (batch,), generator=gen)
    if policy.head == "flow":
        out[NOISE_INPUT] = torch.randn(batch, policy.horizon, policy.action_dim, generator=gen)
    return out


def probe_inputs(policy: VLAPolicy, batch: int = 64, seed: int = 1) -> dict[str, torch.Tensor]:
    """`example_inputs` with proprioception spread around the policy's own normalizer
    statistics (3 std wide), so a trained policy is checked where it operates."""
    out = example_inputs(policy, batch, seed)
    if "policy" in out:
        norm = policy.prefix.proprio_norm
        std = torch.sqrt(norm.var + norm.eps)
        gen = torch.Generator().manual_seed(seed + 1)
        noise = torch.randn(out["policy"].shape, generator=gen)
        out["policy"] = (norm.mean + 3.0 * std * noise).to(torch.float32)
    return out


def vla_metadata(
    policy: VLAPolicy,
    *,
    vocabulary: Sequence[str] = (),
    n_act: int | None = None,
    ensemble_decay: float | None = None,
    noise_temperature: float = 1.0,
    best_of_n: int = 1,
) -> VLAMetadata:
    spec, cfg = policy.inputs, policy.cfg
    if vocabulary and len(vocabulary) != spec.vocab_size:
        raise ExportError(
            f"the vocabulary has {len(vocabulary)} words; the model's has {spec.vocab_size}"
        )
    names = [input_name(k) for k in graph_keys(policy)]
    if policy.head == "flow":
        names.append(NOISE_INPUT)
    return VLAMetadata(
        head=policy.head,
        proprio_dim=spec.proprio_dim,
        action_dim=spec.action_dim,
        cameras={k: [int(v[0]), int(v[1])] for k, v in spec.cameras.items()},
        instruction_len=spec.instruction_len,
        vocab_size=spec.vocab_size,
        pad_id=spec.pad_id,
        horizon=cfg.horizon,
        num_steps=policy.num_steps,  # what the graph integrates (an export may set it)
        n_act=int(cfg.n_act if n_act is None else n_act),
        inputs=names,
        vocabulary=[str(w) for w in vocabulary],
        n_tokens=cfg.n_tokens,
        token_selector=policy.selector is not None,
        selector_holds_token=policy.selector is not None and cfg.selector_holds_token,
        advantage=cfg.advantage,
        inference_advantage=cfg.inference_advantage if cfg.advantage else None,
        guidance_scale=cfg.guidance_scale,
        ensemble_decay=ensemble_decay,
        noise_temperature=float(noise_temperature),
        best_of_n=int(best_of_n),
    )


def export_vla_onnx(
    policy: VLAPolicy,
    path: Path | str,
    *,
    base: PolicyMetadata | None = None,
    vocabulary: Sequence[str] = (),
    n_act: int | None = None,
    ensemble_decay: float | None = None,
    noise_temperature: float = 1.0,
    best_of_n: int = 1,
    exporter: str = "torchscript",
) -> Path:
    """Write `policy`'s deterministic chunk graph to `path`; `base` adds the robot/task
    metadata (`PolicyMetadata` keys) beside the VLA record. `n_act`, `ensemble_decay`,
    `noise_temperature` and `best_of_n` are execution settings recorded in the metadata
    (guidance is in the graph: set `policy.cfg.guidance_scale` before exporting).
    `exporter`: torchscript (the default, seconds) or dynamo (minutes on the unrolled
    graph; see `EXPORTERS`)."""
    if exporter not in EXPORTERS:
        raise ExportError(f"unknown exporter {exporter!r}; valid: {', '.join(EXPORTERS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    policy = policy.to("cpu").eval()
    meta = vla_metadata(
        policy,
        vocabulary=vocabulary,
        n_act=n_act,
        ensemble_decay=ensemble_decay,
        noise_temperature=noise_temperature,
        best_of_n=best_of_n,
    )
    keys = graph_keys(policy)
    example = example_inputs(policy)
    args = tuple(example[k] for k in keys)
    if policy.head == "flow":
        args = (*args, example[NOISE_INPUT])
    graph = _ChunkGraph(policy, keys).eval()
    with _quiet_exporter() as captured:
        try:
            with torch.no_grad():
                _export(graph, args, path, meta.inputs, exporter, outputs=graph_outputs(policy))
        except Exception as exc:
            raise ExportError(
                f"ONNX export of the VLA failed ({exporter} exporter): "
                f"{type(exc).__name__}: {exc}\n{captured.getvalue()[-2000:]}"
            ) from exc
    model = onnx.load(str(path))
    model.producer_name = "unilab"
    model.doc_string = (
        f"unilab VLA ({policy.head} head): inputs {meta.inputs} -> {ACTIONS_OUTPUT} "
        f"(batch, {meta.horizon}, {meta.action_dim}) float32"
        + (f", {meta.num_steps} Euler steps inside" if policy.head == "flow" else "")
        + (f"; {TOKEN_OUTPUT} (batch,) int64" if len(graph_outputs(policy)) == 2 else "")
    )
    del model.metadata_props[:]
    props = dict(base.to_props()) if base is not None else {}
    props[VLA_KEY] = meta.to_json()
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def run_onnx(path: Path | str, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run([ACTIONS_OUTPUT], dict(feeds))
    return np.asarray(out)


def onnx_feeds(policy: VLAPolicy, inputs: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The ONNX feed dict for observations (+ `noise`) given under their observation keys."""
    feeds = {input_name(k): inputs[k].cpu().numpy() for k in graph_keys(policy)}
    if policy.head == "flow":
        feeds[NOISE_INPUT] = inputs[NOISE_INPUT].cpu().numpy().astype(np.float32)
    return feeds


def vla_onnx_max_abs_diff(
    path: Path | str, policy: VLAPolicy, inputs: Mapping[str, torch.Tensor]
) -> float:
    """Largest |onnxruntime - torch| of the chunk for the same observations and noise."""
    out = run_onnx(path, onnx_feeds(policy, inputs))
    obs = {k: inputs[k] for k in graph_keys(policy)}
    with torch.no_grad():
        ref = policy.eval()(obs, inputs.get(NOISE_INPUT, torch.zeros(()))).numpy()
    return float(np.max(np.abs(out - ref)))


def export_checked(
    policy: VLAPolicy, path: Path | str, probes: int = 64, **kwargs: object
) -> tuple[Path, float]:
    """Export, then compare onnxruntime with torch on random inputs; ExportError above
    `TOLERANCE`. -> (path, max abs difference)."""
    out = export_vla_onnx(policy, path, **kwargs)  # type: ignore[arg-type]
    diff = vla_onnx_max_abs_diff(out, policy, probe_inputs(policy, probes, seed=1))
    if not diff <= TOLERANCE:
        raise ExportError(f"{out}: onnxruntime and torch disagree by {diff:.3g} (> {TOLERANCE})")
    return out, diff
