"""`unilab export <run dir>`: newest good checkpoint → export/policy.onnx, policy.pt, metadata.json.

The three files are written into `export/.exporting-<pid>/` first. There onnxruntime is run
against the torch policy on random observations spread around the normalizer's statistics;
a disagreement above `TOLERANCE` fails the export. Only a checked export replaces the
previous files (each fsynced and renamed into place), so a failed or interrupted export
leaves the last good one; `remove_leftovers` cleans a crashed export's folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from unilab.export.onnx_export import ExportError, export_onnx, onnx_max_abs_diff
from unilab.export.run_policy import load_run_policy
from unilab.export.torchscript_export import export_torchscript
from unilab.runtime.torch_policy import PolicyModule
from unilab.utils.atomic import fsync_dir, fsync_file, remove_leftovers

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
    remove_leftovers(out, recursive=False)
    staging = out / f".exporting-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        meta = policy.metadata
        onnx_path = export_onnx(policy.actor, meta, staging / ONNX_NAME)
        probe = probe_observations(policy.actor, meta.obs_dims, 256)
        diff = onnx_max_abs_diff(onnx_path, policy.actor, probe, meta)
        if not diff <= TOLERANCE:
            raise ExportError(
                f"{out / ONNX_NAME}: onnxruntime and torch disagree by {diff:.3g} "
                f"(> {TOLERANCE}) on random observations; the previous export is kept"
            )
        export_torchscript(policy.actor, meta, staging / TORCHSCRIPT_NAME)
        (staging / METADATA_NAME).write_text(meta.to_json() + "\n")
        written = {}
        for kind, name in (
            ("onnx", ONNX_NAME),
            ("torchscript", TORCHSCRIPT_NAME),
            ("metadata", METADATA_NAME),
        ):
            fsync_file(staging / name)
            os.replace(staging / name, out / name)
            written[kind] = out / name
        fsync_dir(out)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
