"""`unilab export <run dir>`: newest good checkpoint → export/policy.onnx, policy.pt, metadata.json.

The files are written into `export/.exporting-<pid>/` first. There onnxruntime is run
against the torch policy on random observations spread around the normalizer's statistics;
a disagreement above `TOLERANCE` fails the export.

A VLA run (bc_flow, bc_mse) exports one graph with the K Euler steps inside and the noise
as an input (`unilab.export.vla_onnx`; onnxruntime and torch are compared on the same
noise), its metadata (robot/task keys plus the VLA record: cameras and sizes, vocabulary,
H, K, n_act, ensembling) and metadata.json; no TorchScript file, since ONNX expresses the
whole policy and `unilab deploy` runs it without torch. Only a checked export replaces the
previous files (each fsynced and renamed into place), so a failed or interrupted export
leaves the last good one; `remove_leftovers` cleans a crashed export's folder.

`inference_settings` (a VLA; what `unilab tune-inference` chose): `n_act`,
`ensemble_decay`, `noise_temperature` and `best_of_n` go into the VLA metadata, which
deploy's chunk executor reads; `guidance_scale` is compiled into the graph (1.0, the
conditional policy alone, exports without the unconditional branch), and so is
`flow_steps` (the graph unrolls that many Euler steps; the metadata's K says how many).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from unilab.export.onnx_export import ExportError, export_onnx, onnx_max_abs_diff
from unilab.export.run_policy import RunPolicy, load_run_policy
from unilab.export.torchscript_export import export_torchscript
from unilab.export.vla_metadata import VLA_KEY
from unilab.export.vla_onnx import export_checked, vla_metadata
from unilab.policies.vla.policy import VLAPolicy
from unilab.runtime.torch_policy import PolicyModule
from unilab.utils.atomic import fsync_dir, fsync_file, remove_leftovers

TOLERANCE = 1e-4
ONNX_NAME = "policy.onnx"
TORCHSCRIPT_NAME = "policy.pt"
METADATA_NAME = "metadata.json"


INFERENCE_SETTINGS = (
    "n_act",
    "ensemble_decay",
    "noise_temperature",
    "guidance_scale",
    "best_of_n",
    "flow_steps",
)


def export_run(
    run_dir: Path,
    out_dir: Path | None = None,
    inference_settings: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Export a run's policy; returns {"onnx": ..., "torchscript": ..., "metadata": ...}
    ("torchscript" only for the MLP policies).

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
        if isinstance(policy.actor, VLAPolicy):
            kinds = _export_vla(policy, staging, out, inference_settings or {})
        else:
            if inference_settings:
                raise ExportError(
                    "inference settings apply to chunked VLA policies; this run's policy is "
                    f"{type(policy.actor).__name__}"
                )
            kinds = _export_mlp(policy, staging, out)
        written = {}
        for kind, name in kinds:
            fsync_file(staging / name)
            os.replace(staging / name, out / name)
            written[kind] = out / name
        fsync_dir(out)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _execution(actor: VLAPolicy, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Check `settings` and apply guidance and flow steps to the actor (both are in the
    graph); -> the metadata keyword arguments."""
    unknown = sorted(set(settings) - set(INFERENCE_SETTINGS))
    if unknown:
        raise ExportError(
            f"unknown inference settings {unknown}; known: {', '.join(INFERENCE_SETTINGS)}"
        )
    if "guidance_scale" in settings:
        scale = settings["guidance_scale"]
        scale = None if scale is None or float(scale) == 1.0 else float(scale)
        if scale is not None and not any(
            c in actor.prefix.conditions for c in actor.cfg.guidance_drop
        ):
            raise ExportError(
                f"guidance_scale={scale} needs a condition to drop; the model has "
                f"{actor.condition_names or 'none'}"
            )
        actor.cfg = dataclasses.replace(actor.cfg, guidance_scale=scale)
    if settings.get("flow_steps") is not None:
        steps = settings["flow_steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ExportError(f"flow_steps={steps!r} must be an integer >= 1")
        if actor.head != "flow":
            raise ExportError(f"flow_steps applies to the flow head; this VLA's is {actor.head!r}")
        actor.num_steps = steps
    if int(settings.get("best_of_n", 1)) > 1:
        try:
            actor.check_best_of_n()
        except ValueError as exc:
            raise ExportError(f"best_of_n: {exc}") from None
    kwargs: dict[str, Any] = {}
    if "n_act" in settings:
        n_act = int(settings["n_act"])
        if not 1 <= n_act <= actor.horizon:
            raise ExportError(f"n_act={n_act} must be in [1, {actor.horizon}]")
        kwargs["n_act"] = n_act
    if "ensemble_decay" in settings:
        decay = settings["ensemble_decay"]
        kwargs["ensemble_decay"] = None if decay is None else float(decay)
    if "noise_temperature" in settings:
        kwargs["noise_temperature"] = float(settings["noise_temperature"])
    if "best_of_n" in settings:
        kwargs["best_of_n"] = int(settings["best_of_n"])
    return kwargs


def _export_vla(
    policy: RunPolicy, staging: Path, out: Path, settings: Mapping[str, Any]
) -> list[tuple[str, str]]:
    actor = policy.actor
    assert isinstance(actor, VLAPolicy)
    execution = _execution(actor, settings)
    size = actor.inputs.vocab_size
    vocabulary = list(policy.vocabulary[:size]) if len(policy.vocabulary) >= size else []
    meta = policy.metadata
    try:
        _, diff = export_checked(
            actor,
            staging / ONNX_NAME,
            probes=64,
            base=meta,
            vocabulary=vocabulary,
            **execution,
        )
    except ExportError as exc:
        raise ExportError(f"{out / ONNX_NAME}: {exc}; the previous export is kept") from None
    record = json.loads(vla_metadata(actor, vocabulary=vocabulary, **execution).to_json())
    doc = {**json.loads(meta.to_json()), VLA_KEY: record, "onnx_max_abs_diff": diff}
    (staging / METADATA_NAME).write_text(json.dumps(doc, indent=2) + "\n")
    return [("onnx", ONNX_NAME), ("metadata", METADATA_NAME)]


def _export_mlp(policy: RunPolicy, staging: Path, out: Path) -> list[tuple[str, str]]:
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
    return [("onnx", ONNX_NAME), ("torchscript", TORCHSCRIPT_NAME), ("metadata", METADATA_NAME)]


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
