"""Actor → TorchScript (`torch.jit.trace`), with the export metadata as an extra file.

Read it back with `torch.jit.load(path, _extra_files={"metadata.json": ""})`. torch marks
`torch.jit` as deprecated in favour of `torch.export`; tracing a plain MLP still works in
torch 2.13, and C++ deployments (libtorch) still read these files.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from unilab.export.metadata import PolicyMetadata

METADATA_FILE = "metadata.json"


def export_torchscript(actor: nn.Module, meta: PolicyMetadata, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    actor = actor.to("cpu").eval()
    example = torch.zeros(2, meta.obs_dim, dtype=torch.float32)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(actor, (example,))
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
