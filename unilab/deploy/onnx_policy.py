"""Run an exported policy with onnxruntime alone (no torch): metadata plus a numpy call.

`OnnxPolicy` is a `unilab.runtime.policy.Policy[numpy.ndarray]`: `act(obs)` takes the
observation groups the graph reads and returns an action chunk (N, H, action_dim), so play
and eval run it through the same rollout helper as a torch policy. `policy(obs_vector)`
keeps the single-step form the deploy loop uses: the first action of the chunk for one
group's (obs_dim,) or (n, obs_dim) observations.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnxruntime as ort

from unilab.deploy.onnx_session import is_vla, open_session
from unilab.export.metadata import OUTPUT_NAME, MetadataError, PolicyMetadata
from unilab.runtime.policy import ActionChunk


class OnnxPolicy:
    """One intra-op thread: a control loop wants low latency, not throughput, and must not
    compete with the simulator for cores."""

    def __init__(
        self, path: Path, threads: int = 1, session: ort.InferenceSession | None = None
    ) -> None:
        self.path = Path(path)
        self.session = session if session is not None else open_session(self.path, threads)
        if is_vla(self.session):
            raise MetadataError(
                f"{self.path} is an exported VLA: run it with "
                "unilab.deploy.vla_onnx_policy.OnnxVLAPolicy (load_onnx_policy picks it)"
            )
        props = dict(self.session.get_modelmeta().custom_metadata_map)
        self.metadata = PolicyMetadata.from_props(props, source=str(self.path))
        self.inputs = self.metadata.graph_inputs
        """Graph input name -> observation group."""
        names = [i.name for i in self.session.get_inputs()]
        if sorted(names) != sorted(self.inputs):
            raise MetadataError(
                f"{self.path}: the graph's inputs {names} differ from those its metadata "
                f"names {list(self.inputs)}"
            )

    @property
    def obs_groups(self) -> tuple[str, ...]:
        return tuple(self.inputs.values())

    @property
    def obs_dim(self) -> int:
        return self.metadata.obs_dim

    @property
    def action_dim(self) -> int:
        return self.metadata.action_dim

    @property
    def action_horizon(self) -> int:
        return self.metadata.action_horizon

    def act_inference(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """(N, H, action_dim) float32 from the groups' (N, d) observations."""
        feed = {}
        for name, group in self.inputs.items():
            if group not in obs:
                raise ValueError(
                    f"observation group {group!r} is missing; this policy reads {self.obs_groups}"
                )
            array = np.ascontiguousarray(obs[group], dtype=np.float32)
            width = self.metadata.obs_dims[group]
            if array.ndim != 2 or array.shape[1] != width:
                raise ValueError(
                    f"observation group {group!r} has shape {array.shape}; this policy expects "
                    f"(n, {width})"
                )
            feed[name] = array
        (actions,) = self.session.run([OUTPUT_NAME], feed)
        out = np.asarray(actions, dtype=np.float32)
        n = out.shape[0]
        return out.reshape(n, self.action_horizon, self.action_dim)

    def act(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = True
    ) -> ActionChunk[np.ndarray]:
        """The exported graph is deterministic; `deterministic` is accepted and ignored."""
        return ActionChunk(self.act_inference(obs))

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """First action of the chunk for `obs_group`'s (obs_dim,) or (n, obs_dim) observations."""
        obs = np.asarray(obs, dtype=np.float32)
        single = obs.ndim == 1
        batch = obs[None] if single else obs
        if batch.ndim != 2 or batch.shape[1] != self.obs_dim:
            raise ValueError(
                f"observation has shape {obs.shape}; this policy expects ({self.obs_dim},) or "
                f"(n, {self.obs_dim})"
            )
        if len(self.inputs) != 1:
            raise ValueError(
                f"this policy reads several observation groups {self.obs_groups}; call act()"
            )
        first = self.act_inference({self.obs_groups[0]: batch})[:, 0]
        return first[0] if single else first
