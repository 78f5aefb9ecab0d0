"""`unilab export <run dir>`: newest good checkpoint → export/policy.onnx, policy.pt, metadata.json.

After writing, onnxruntime is run against the torch actor on random observations spread
around the normalizer's statistics; a disagreement above `TOLERANCE` fails the export.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from unilab.export.onnx_export import ExportError, export_onnx, onnx_max_abs_diff
from unilab.export.run_policy import load_run_policy
from unilab.export.torchscript_export import export_torchscript
from unilab.runtime.torch_policy import PolicyModule

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
    probe = probe_observations(policy.actor, meta.obs_dims, 256)
    diff = onnx_max_abs_diff(onnx_path, policy.actor, probe, meta)
    if not diff <= TOLERANCE:
        raise ExportError(
            f"{onnx_path}: onnxruntime and torch disagree by {diff:.3g} (> {TOLERANCE}) on "
            "random observations"
        )
    ts_path = export_torchscript(policy.actor, meta, out / TORCHSCRIPT_NAME)
    meta_path = out / METADATA_NAME
    meta_path.write_text(meta.to_json() + "\n")
    return {"onnx": onnx_path, "torchscript": ts_path, "metadata": meta_path}


def probe_observations(
    policy: PolicyModule, obs_dims: dict[str, int], n: int, seed: int = 0
) -> dict[str, np.ndarray]:
    """Observations for each group the policy reads: drawn around the policy's normalizer
    statistics (3 std wide) for a single-group policy that has one, else standard normal."""
    rng = np.random.default_rng(seed)
    groups = list(policy.obs_groups)
    norm = getattr(policy, "normalizer", None)
    out: dict[str, np.ndarray] = {}
    for group in groups:
        if norm is not None and len(groups) == 1:
            mean = norm.mean.detach().cpu().numpy()
            std = np.sqrt(norm.var.detach().cpu().numpy())
        else:
            mean, std = np.zeros(obs_dims[group]), np.ones(obs_dims[group])
        out[group] = (mean + 3.0 * std * rng.standard_normal((n, mean.shape[0]))).astype(np.float32)
    return out
