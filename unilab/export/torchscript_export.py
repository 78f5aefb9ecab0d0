"""Policy → TorchScript (`torch.jit.trace` of its deterministic path, the same graph inputs and
output as the ONNX file), with the export metadata as an extra file.

Read it back with `torch.jit.load(path, _extra_files={"metadata.json": ""})`. torch marks
`torch.jit` as deprecated in favour of `torch.export`; tracing a plain MLP still works in
torch 2.13, and C++ deployments (libtorch) still read these files.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from unilab.export.metadata import PolicyMetadata
from unilab.export.onnx_export import ExportGraph, example_inputs
from unilab.runtime.torch_policy import PolicyModule

METADATA_FILE = "metadata.json"


def export_torchscript(policy: PolicyModule, meta: PolicyMetadata, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    policy = policy.to("cpu").eval()
    graph = ExportGraph(policy, list(meta.graph_inputs.values())).eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(graph, example_inputs(meta))
        torch.jit.save(traced, str(path), _extra_files={METADATA_FILE: meta.to_json()})
    return path


def load_torchscript(path: Path) -> tuple[torch.jit.ScriptModule, str]:
    """The module and its metadata JSON text."""
    extra = {METADATA_FILE: ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path), _extra_files=extra)
    text = extra[METADATA_FILE]
    return module, text.decode() if isinstance(text, bytes) else text
