"""`unilab export <run dir>`: newest good checkpoint → export/policy.onnx, policy.pt, metadata.json.

After writing, onnxruntime is run against the torch actor on random observations spread
around the normalizer's statistics; a disagreement above `TOLERANCE` fails the export.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from unilab.export.onnx_export import ExportError, export_onnx, onnx_max_abs_diff
from unilab.export.run_policy import load_run_policy
from unilab.export.torchscript_export import export_torchscript

TOLERANCE = 1e-4
ONNX_NAME = "policy.onnx"
TORCHSCRIPT_NAME = "policy.pt"
METADATA_NAME = "metadata.json"


def export_run(run_dir: Path, out_dir: Path | None = None) -> dict[str, Path]:
    """Export a run's policy; returns {"onnx": ..., "torchscript": ..., "metadata": ...}.

    `out_dir` defaults to `<run_dir>/export`. Raises `RunDirError` (no usable run or
    checkpoint) or `ExportError` (the exporter failed or its graph disagrees with torch).
    """
    run_dir = Path(run_dir)
    policy = load_run_policy(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "export"
    out.mkdir(parents=True, exist_ok=True)
    meta = policy.metadata
    onnx_path = export_onnx(policy.actor, meta, out / ONNX_NAME)
    diff = onnx_max_abs_diff(onnx_path, policy.actor, probe_observations(policy.actor, 256))
    if not diff <= TOLERANCE:
        raise ExportError(
            f"{onnx_path}: onnxruntime and torch disagree by {diff:.3g} (> {TOLERANCE}) on "
            "random observations"
        )
    ts_path = export_torchscript(policy.actor, meta, out / TORCHSCRIPT_NAME)
    meta_path = out / METADATA_NAME
    meta_path.write_text(meta.to_json() + "\n")
    return {"onnx": onnx_path, "torchscript": ts_path, "metadata": meta_path}


def probe_observations(actor: torch.nn.Module, n: int, seed: int = 0) -> np.ndarray:
    """Observations drawn around the actor's normalizer statistics (3 std wide), or
    standard normal where it has none."""
    rng = np.random.default_rng(seed)
    norm = getattr(actor, "normalizer", None)
    if norm is not None:
        mean = norm.mean.detach().cpu().numpy()
        std = np.sqrt(norm.var.detach().cpu().numpy())
    else:
        first = next(m for m in actor.modules() if isinstance(m, torch.nn.Linear))
        mean, std = np.zeros(first.in_features), np.ones(first.in_features)
    return (mean + 3.0 * std * rng.standard_normal((n, mean.shape[0]))).astype(np.float32)
