"""Policy → ONNX: one file, normalizer inside the graph, dynamic batch, unilab metadata.

Uses torch's `torch.export`-based exporter (`dynamo=True`, the default and supported one
since torch 2.9; the TorchScript-based exporter still runs in 2.13 but is slated for
removal). Opset 18 is the lowest this exporter implements natively. The graph is the
policy's deterministic path (`Policy.act_inference`, see `unilab.runtime.policy`): one
float32 input per observation group it reads, named as `meta.graph_inputs` says (`obs` for
the MLP actors' single `policy` group), to `actions`: (batch, action_dim) for H = 1,
(batch, H, action_dim) for chunked policies.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from unilab.export.metadata import INPUT_NAME, OUTPUT_NAME, PolicyMetadata
from unilab.runtime.torch_policy import PolicyModule

OPSET = 18


class ExportError(RuntimeError):
    """Export failed or produced a graph that disagrees with the torch actor."""


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[io.StringIO]:
    """The exporter logs registry warnings (e.g. torchvision ops absent) and deprecation
    notes that say nothing about this graph; keep them for an error message instead."""
    captured = io.StringIO()
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(captured):
            warnings.simplefilter("ignore")
            yield captured
    finally:
        logger.setLevel(level)


def graph_input_names(obs_groups: Sequence[str]) -> dict[str, str]:
    """Graph input name -> observation group: `obs` for a single group, else `obs_<group>`."""
    groups = list(obs_groups)
    if len(groups) == 1:
        return {INPUT_NAME: groups[0]}
    return {f"obs_{g}": g for g in groups}


class ExportGraph(nn.Module):
    """A policy's deterministic path with positional tensor inputs (what exporters trace)."""

    def __init__(self, policy: PolicyModule, groups: Sequence[str]) -> None:
        super().__init__()
        self.policy = policy
        self.groups = list(groups)
        self.single_action = policy.action_horizon == 1

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        actions = self.policy.act_inference(dict(zip(self.groups, inputs, strict=True)))
        return actions[:, 0] if self.single_action else actions


def example_inputs(meta: PolicyMetadata, batch: int = 2) -> tuple[torch.Tensor, ...]:
    """Zero observations for each graph input (vector groups)."""
    return tuple(
        torch.zeros(batch, meta.obs_dims[group], dtype=torch.float32)
        for group in meta.graph_inputs.values()
    )


def export_onnx(policy: PolicyModule, meta: PolicyMetadata, path: Path, opset: int = OPSET) -> Path:
    """Write `policy`'s deterministic path to `path` with `meta` in metadata_props."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    policy = policy.to("cpu").eval()
    inputs = meta.graph_inputs
    graph = ExportGraph(policy, list(inputs.values()))
    batch = torch.export.Dim("batch")
    with _quiet_exporter() as captured:
        try:
            with torch.no_grad():
                torch.onnx.export(
                    graph,
                    example_inputs(meta),
                    str(path),
                    input_names=list(inputs),
                    output_names=[OUTPUT_NAME],
                    opset_version=opset,
                    dynamo=True,
                    dynamic_shapes=(tuple({0: batch} for _ in inputs),),  # for *inputs
                    external_data=False,
                    verbose=False,
                )
        except Exception as exc:
            raise ExportError(
                f"ONNX export of {type(policy).__name__} failed: {type(exc).__name__}: {exc}\n"
                f"{captured.getvalue()[-2000:]}"
            ) from exc
    model = onnx.load(str(path))
    model.producer_name = "unilab"
    model.producer_version = meta.unilab_version
    model.doc_string = (
        f"unilab {meta.algorithm} policy for task {meta.task} (robot {meta.robot}): "
        + ", ".join(f"{n} (batch, {meta.obs_dims[g]})" for n, g in inputs.items())
        + f" float32 -> {OUTPUT_NAME} "
        + (
            f"(batch, {meta.action_dim})"
            if meta.action_horizon == 1
            else f"(batch, {meta.action_horizon}, {meta.action_dim})"
        )
        + " float32, deterministic, observation normalizer included"
    )
    del model.metadata_props[:]
    for key, value in meta.to_props().items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def onnx_max_abs_diff(
    path: Path,
    policy: PolicyModule,
    obs: Mapping[str, np.ndarray] | np.ndarray,
    meta: PolicyMetadata | None = None,
) -> float:
    """Largest |onnxruntime(obs) - policy.act_inference(obs)| over a batch of observations
    (`obs`: group -> (n, d), or one array for a single-group policy)."""
    import onnxruntime as ort

    groups = list(policy.obs_groups)
    if not isinstance(obs, Mapping):
        obs = {groups[0]: obs}
    obs = {g: np.ascontiguousarray(obs[g], dtype=np.float32) for g in groups}
    names = meta.graph_inputs if meta is not None else graph_input_names(groups)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (ort_out,) = session.run([OUTPUT_NAME], {n: obs[g] for n, g in names.items()})
    with torch.no_grad():
        ref = policy.act_inference({g: torch.from_numpy(v) for g, v in obs.items()}).numpy()
    got = np.asarray(ort_out)
    got = got.reshape(ref.shape) if got.size == ref.size else got
    return float(np.max(np.abs(got - ref))) if ref.size else 0.0
