"""Actor → ONNX: one file, normalizer inside the graph, dynamic batch, unilab metadata.

Uses torch's `torch.export`-based exporter (`dynamo=True`, the default and supported one
since torch 2.9; the TorchScript-based exporter still runs in 2.13 but is slated for
removal). Opset 18 is the lowest this exporter implements natively. The graph maps
`obs` (batch, obs_dim) float32 to `actions` (batch, action_dim) float32: the deterministic
action, exactly `actor(obs)`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from unilab.export.metadata import INPUT_NAME, OUTPUT_NAME, PolicyMetadata

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


def export_onnx(actor: nn.Module, meta: PolicyMetadata, path: Path, opset: int = OPSET) -> Path:
    """Write `actor`'s deterministic path to `path` with `meta` in metadata_props."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    actor = actor.to("cpu").eval()
    example = torch.zeros(2, meta.obs_dim, dtype=torch.float32)
    with _quiet_exporter() as captured:
        try:
            with torch.no_grad():
                torch.onnx.export(
                    actor,
                    (example,),
                    str(path),
                    input_names=[INPUT_NAME],
                    output_names=[OUTPUT_NAME],
                    opset_version=opset,
                    dynamo=True,
                    dynamic_shapes=({0: torch.export.Dim("batch")},),
                    external_data=False,
                    verbose=False,
                )
        except Exception as exc:
            raise ExportError(
                f"ONNX export of {type(actor).__name__} failed: {type(exc).__name__}: {exc}\n"
                f"{captured.getvalue()[-2000:]}"
            ) from exc
    model = onnx.load(str(path))
    model.producer_name = "unilab"
    model.producer_version = meta.unilab_version
    model.doc_string = (
        f"unilab {meta.algorithm} policy for task {meta.task} (robot {meta.robot}): "
        f"{INPUT_NAME} (batch, {meta.obs_dim}) float32 -> {OUTPUT_NAME} "
        f"(batch, {meta.action_dim}) float32, deterministic, observation normalizer included"
    )
    del model.metadata_props[:]
    for key, value in meta.to_props().items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def onnx_max_abs_diff(path: Path, actor: nn.Module, obs: np.ndarray) -> float:
    """Largest |onnxruntime(obs) - actor(obs)| over a batch of observations."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    obs = np.ascontiguousarray(obs, dtype=np.float32)
    (ort_out,) = session.run([OUTPUT_NAME], {INPUT_NAME: obs})
    with torch.no_grad():
        ref = actor(torch.from_numpy(obs)).numpy()
    return float(np.max(np.abs(np.asarray(ort_out) - ref))) if obs.size else 0.0
