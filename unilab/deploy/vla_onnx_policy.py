"""Run an exported VLA with onnxruntime alone (no torch): chunks from observations and noise,
executed step by step through the same `ChunkExecutor` as play and eval.

    policy = OnnxVLAPolicy("export/vla.onnx")
    executor = policy.executor(num_envs=1, seed=0)
    action = executor({"policy": q, "images/front": rgb, "instruction": ids})  # (1, A)

`OnnxVLAPolicy` is also a `unilab.runtime.policy.Policy[numpy.ndarray]` with its own
executor (`ChunkedPolicy`), so `unilab play` / `unilab eval` run an exported VLA through
the same rollout helper as the torch one.

Observation keys are the policy's (`policy`, `images/<cam>`, `instruction`, and `token` /
`advantage` when the model has them; missing conditions are fed as null, -1, except a
missing token of a graph with a token selector: -2, the selector picks it, and a missing
advantage of a graph whose metadata names an `inference_advantage`: that value, 1 for RECAP).
With `selector_holds_token` in the metadata the executor asks the graph's selector once per
episode (its `selected_token` output) and feeds that token to the rest of the episode's
chunks, as the torch policy's executor does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnxruntime as ort

from unilab.deploy.onnx_session import open_session
from unilab.export.metadata import MetadataError, PolicyMetadata
from unilab.export.vla_metadata import (
    ACTIONS_OUTPUT,
    NOISE_INPUT,
    TOKEN_OUTPUT,
    VLAMetadata,
    input_name,
)
from unilab.policies.vla.chunking import ChunkExecutor
from unilab.runtime.policy import ActionChunk


class OnnxVLAPolicy:
    """`plan(obs, noise)` -> (n, H, A) chunks; `executor(...)` -> a per-step wrapper. One
    intra-op thread by default: a control loop wants latency and must leave cores to the
    simulator or the robot driver."""

    def __init__(
        self, path: Path | str, threads: int = 1, session: ort.InferenceSession | None = None
    ) -> None:
        self.path = Path(path)
        self.session = session if session is not None else open_session(self.path, threads)
        props = dict(self.session.get_modelmeta().custom_metadata_map)
        self.metadata = VLAMetadata.from_props(props, source=str(self.path))
        self.robot: PolicyMetadata | None = (
            PolicyMetadata.from_props(props, source=str(self.path))
            if "format_version" in props
            else None
        )
        """Robot/task metadata when the exporter was given it."""
        names = [i.name for i in self.session.get_inputs()]
        if names != self.metadata.inputs:
            raise MetadataError(
                f"{self.path}: graph inputs {names} differ from the metadata's "
                f"{self.metadata.inputs}"
            )
        meta = self.metadata
        outputs = [o.name for o in self.session.get_outputs()]
        if meta.selector_holds_token and TOKEN_OUTPUT not in outputs:
            raise MetadataError(
                f"{self.path}: the metadata says the selector's token is held per episode, "
                f"but the graph has no {TOKEN_OUTPUT!r} output (outputs: {outputs})"
            )
        self.obs_keys: list[str] = ["policy"] if meta.proprio_dim else []
        self.obs_keys += [f"images/{cam}" for cam in meta.cameras]
        if meta.vocab_size:
            self.obs_keys.append("instruction")
        self.condition_keys = (["token"] if meta.n_tokens else []) + (
            ["advantage"] if meta.advantage else []
        )

        self._rng = np.random.default_rng(0)
        self.notes: list[str] = []
        """Exported settings this runner does not apply (read them before trusting a run)."""
        if meta.best_of_n > 1:
            self.notes.append(
                f"best_of_n={meta.best_of_n} is recorded but not applied: the graph holds no "
                "value heads to rank candidates, so one chunk is planned per re-plan"
            )

    @property
    def horizon(self) -> int:
        return self.metadata.horizon

    # -- the Policy protocol (numpy) --------------------------------------------------------
    @property
    def obs_groups(self) -> tuple[str, ...]:
        return tuple(self.obs_keys)

    @property
    def action_horizon(self) -> int:
        return self.metadata.horizon

    @property
    def obs_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-env shape of each observation group the graph reads."""
        meta = self.metadata
        shapes: dict[str, tuple[int, ...]] = {}
        if meta.proprio_dim:
            shapes["policy"] = (meta.proprio_dim,)
        for cam, (h, w) in meta.cameras.items():
            shapes[f"images/{cam}"] = (int(h), int(w), 3)
        if meta.vocab_size:
            shapes["instruction"] = (meta.instruction_len,)
        return shapes

    def act(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = True
    ) -> ActionChunk[np.ndarray]:
        """One chunk per env: from zero noise when deterministic, else from this policy's
        own seeded stream (the executor draws its noise from its seed instead)."""
        n = int(np.asarray(obs[self.obs_keys[0]]).shape[0])
        noise = None
        if not deterministic:
            shape = (n, self.metadata.horizon, self.metadata.action_dim)
            noise = self._rng.standard_normal(shape, dtype=np.float32)
        return ActionChunk(self.plan(obs, noise))

    def act_inference(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.plan(obs)

    @property
    def action_dim(self) -> int:
        return self.metadata.action_dim

    def _feeds(self, obs: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        meta = self.metadata
        missing = [k for k in self.obs_keys if k not in obs]
        if missing:
            raise ValueError(f"observation is missing {missing}; this policy reads {self.obs_keys}")
        n = int(np.asarray(obs[self.obs_keys[0]]).shape[0])
        expect: dict[str, tuple[tuple[int, ...], type]] = {}
        if meta.proprio_dim:
            expect["policy"] = ((n, meta.proprio_dim), np.float32)
        for cam, (h, w) in meta.cameras.items():
            expect[f"images/{cam}"] = ((n, h, w, 3), np.uint8)
        if meta.vocab_size:
            expect["instruction"] = ((n, meta.instruction_len), np.int64)
        feeds: dict[str, np.ndarray] = {}
        for key, (shape, dtype) in expect.items():
            x = np.asarray(obs[key])
            if x.shape != shape:
                raise ValueError(f"observation {key!r} has shape {x.shape}; expected {shape}")
            if dtype is np.uint8 and x.dtype != np.uint8:
                raise ValueError(f"observation {key!r} must be uint8 images, got {x.dtype}")
            feeds[input_name(key)] = np.ascontiguousarray(x, dtype=dtype)
        if meta.vocab_size:
            ids = feeds["instruction"]
            if ids.size and (ids.min() < 0 or ids.max() >= meta.vocab_size):
                raise ValueError(f"instruction ids must be in [0, {meta.vocab_size})")
        for key in self.condition_keys:
            value = obs.get(key)
            # no token given: the graph's selector picks it when it has one, else null
            fill = -2 if key == "token" and meta.token_selector else -1
            if key == "advantage" and meta.inference_advantage is not None:
                fill = int(meta.inference_advantage)  # RECAP: the positive-advantage policy
            arr = np.full(n, fill, np.int64) if value is None else np.asarray(value, np.int64)
            feeds[key] = np.ascontiguousarray(arr.reshape(n))
        return feeds, n

    def plan(self, obs: Mapping[str, np.ndarray], noise: np.ndarray | None = None) -> np.ndarray:
        """Action chunks (n, H, A) float32 for n observations; `noise` (n, H, A) is the
        flow's initial noise (zeros when None; ignored by an MSE head)."""
        feeds, n = self._feeds(obs)
        meta = self.metadata
        if meta.head == "flow":
            shape = (n, meta.horizon, meta.action_dim)
            noise = np.zeros(shape, np.float32) if noise is None else np.asarray(noise, np.float32)
            if noise.shape != shape:
                raise ValueError(f"noise has shape {noise.shape}; expected {shape}")
            feeds[NOISE_INPUT] = np.ascontiguousarray(noise)
        (chunks,) = self.session.run([ACTIONS_OUTPUT], feeds)
        return np.asarray(chunks, np.float32)

    def choose_tokens(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """(n,) int64 the graph's selector's tokens for n observations (no token given)."""
        feeds, n = self._feeds({k: v for k, v in obs.items() if k != "token"})
        meta = self.metadata
        if meta.head == "flow":
            zeros = np.zeros((n, meta.horizon, meta.action_dim), np.float32)
            feeds[NOISE_INPUT] = zeros
        (tokens,) = self.session.run([TOKEN_OUTPUT], feeds)
        return np.asarray(tokens, np.int64).reshape(n)

    def executor(
        self,
        num_envs: int,
        seed: int = 0,
        n_act: int | None = None,
        ensemble_decay: float | None = None,
        noise_temperature: float | None = None,
    ) -> ChunkExecutor:
        """A per-step executor with the exported n_act / ensembling / noise temperature
        unless overridden; the selector's token held per episode when the metadata says so."""
        meta = self.metadata
        return ChunkExecutor(
            self.plan,
            num_envs,
            meta.horizon,
            meta.action_dim,
            meta.n_act if n_act is None else n_act,
            meta.ensemble_decay if ensemble_decay is None else ensemble_decay,
            seed,
            meta.noise_temperature if noise_temperature is None else noise_temperature,
            hold=("token", self.choose_tokens) if meta.selector_holds_token else None,
        )
