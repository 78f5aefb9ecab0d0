"""What an exported VLA carries besides its weights: its inputs (camera names and sizes,
proprioception width, instruction length, vocabulary), chunking (H, K, n_act, temporal
ensembling), guidance, the tuned inference settings (noise temperature, best-of-N) and the
ONNX input names.

Stored as one JSON string under the ONNX metadata key `vla`, beside the `PolicyMetadata`
keys of `unilab.export.metadata` (robot, joints, gains, control period, ...) when the
exporter is given them. Imports neither torch nor the task stack (the deploy side reads it
with only onnxruntime).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from unilab.export.metadata import MetadataError

VLA_FORMAT_VERSION = 1
VLA_KEY = "vla"
NOISE_INPUT = "noise"
ACTIONS_OUTPUT = "actions"
TOKEN_OUTPUT = "selected_token"
"""Second output of a graph with a token selector: (N,) int64, the token each row ran under
(the selector's pick where the input was -2)."""


def input_name(obs_key: str) -> str:
    """ONNX input name of an observation key (`images/front` -> `image_front`)."""
    if obs_key.startswith("images/"):
        return "image_" + obs_key.removeprefix("images/")
    return obs_key


@dataclass(frozen=True)
class VLAMetadata:
    head: str
    """flow (K Euler steps inside the graph, noise input) or mse (the mean; no noise)."""
    proprio_dim: int
    action_dim: int
    cameras: dict[str, list[int]]
    """Camera name -> [height, width]; input `image_<name>` is uint8 (N, H, W, 3)."""
    instruction_len: int
    vocab_size: int
    pad_id: int
    horizon: int
    """H: actions per chunk; output `actions` is (N, H, action_dim) in task units."""
    num_steps: int
    """K: Euler steps inside the graph."""
    n_act: int
    """Actions of each chunk to execute before re-planning."""
    inputs: list[str]
    """ONNX input names in graph order (observations, conditions, then `noise`)."""
    vocabulary: list[str] = field(default_factory=list)
    """Word of each instruction id (empty when the exporter was not given it)."""
    n_tokens: int = 0
    """Behaviour tokens of input `token` (N,) int64; -1 is null."""
    token_selector: bool = False
    """The graph holds a token selector: a `token` of -2 lets it pick the token (what
    deploy feeds when no token is given)."""
    selector_holds_token: bool = False
    """Execution keeps the selector's token for the whole episode (read from the graph's
    `selected_token` output at the episode's first chunk and fed back after), as the torch
    policy does (`model.selector_holds_token`). Files without it re-select at every chunk."""
    advantage: bool = False
    """Input `advantage` (N,) int64: 1 positive, 0 negative, -1 null."""
    inference_advantage: int | None = None
    """What deploy feeds as `advantage` when the caller gives none: 1 for a RECAP-trained
    policy (`awr_flow`: act as the positive-advantage policy), None: -1 (null)."""
    guidance_scale: float | None = None
    """Classifier-free guidance inside the graph (None: conditional only)."""
    ensemble_decay: float | None = None
    """Temporal-ensembling decay m for chunked execution (None: off)."""
    noise_temperature: float = 1.0
    """Scale of the flow's initial noise at execution (1.0: N(0, I); `unilab tune-inference`
    may choose another). Files without it read as 1.0."""
    best_of_n: int = 1
    """Candidate chunks per re-plan ranked by the value heads, as tuned on the torch policy.
    The graph holds no value heads, so the onnxruntime runner plans one candidate and
    reports this as not applied (`OnnxVLAPolicy.notes`). Files without it read as 1."""
    format_version: int = VLA_FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "policy") -> VLAMetadata:
        try:
            doc: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MetadataError(f"{source}: VLA metadata is not JSON: {exc}") from None
        version = int(doc.get("format_version", -1))
        if version < 1 or version > VLA_FORMAT_VERSION:
            raise MetadataError(
                f"{source}: VLA metadata format {version} is not one this unilab reads "
                f"(1..{VLA_FORMAT_VERSION})"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        missing = sorted(required - set(doc))
        if missing:
            raise MetadataError(f"{source}: VLA metadata lacks {missing}")
        return cls(**{k: v for k, v in doc.items() if k in names})

    @classmethod
    def from_props(cls, props: dict[str, str], source: str = "policy") -> VLAMetadata:
        if VLA_KEY not in props:
            raise MetadataError(
                f"{source} has no VLA metadata (no {VLA_KEY!r} key); export it with "
                "unilab.export.vla_onnx.export_vla_onnx"
            )
        return cls.from_json(props[VLA_KEY], source)
