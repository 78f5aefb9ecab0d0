"""Run an exported policy with onnxruntime alone (no torch): metadata plus a numpy call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from unilab.export.metadata import INPUT_NAME, OUTPUT_NAME, MetadataError, PolicyMetadata


class OnnxPolicy:
    """`policy(obs)` maps (obs_dim,) or (n, obs_dim) observations to actions of the same
    leading shape, float32. One intra-op thread: a control loop wants low latency, not
    throughput, and must not compete with the simulator for cores."""

    def __init__(self, path: Path, threads: int = 1) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise MetadataError(f"policy file not found: {self.path}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise MetadataError(f"{self.path} is not a readable ONNX model: {exc}") from None
        props = dict(self.session.get_modelmeta().custom_metadata_map)
        self.metadata = PolicyMetadata.from_props(props, source=str(self.path))
        inputs = [i.name for i in self.session.get_inputs()]
        if inputs != [INPUT_NAME]:
            raise MetadataError(f"{self.path}: expected one input {INPUT_NAME!r}, got {inputs}")

    @property
    def obs_dim(self) -> int:
        return self.metadata.obs_dim

    @property
    def action_dim(self) -> int:
        return self.metadata.action_dim

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        single = obs.ndim == 1
        batch = obs[None] if single else obs
        if batch.ndim != 2 or batch.shape[1] != self.obs_dim:
            raise ValueError(
                f"observation has shape {obs.shape}; this policy expects ({self.obs_dim},) or "
                f"(n, {self.obs_dim})"
            )
        (actions,) = self.session.run([OUTPUT_NAME], {INPUT_NAME: np.ascontiguousarray(batch)})
        out = np.asarray(actions, dtype=np.float32)
        return out[0] if single else out
