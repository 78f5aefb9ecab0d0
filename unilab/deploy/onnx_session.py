"""One onnxruntime session for a policy file: what both ONNX runners open, and what tells
them apart (an exported VLA carries the `vla` metadata key). Torch-free."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

from unilab.export.metadata import MetadataError
from unilab.export.vla_metadata import VLA_KEY


def open_session(path: Path | str, threads: int = 1) -> ort.InferenceSession:
    """A CPU session with `threads` intra-op threads (a control loop wants latency and must
    leave cores to the simulator or the robot driver); unreadable files: MetadataError."""
    path = Path(path)
    if not path.is_file():
        raise MetadataError(f"policy file not found: {path}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise MetadataError(f"{path} is not a readable ONNX model: {exc}") from None


def is_vla(session: ort.InferenceSession) -> bool:
    """The file is an exported VLA (`unilab.export.vla_onnx`), not an MLP policy."""
    return VLA_KEY in session.get_modelmeta().custom_metadata_map
