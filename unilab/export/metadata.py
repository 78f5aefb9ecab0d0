"""What an exported policy carries besides its weights, and its (de)serialization.

The same record goes into the ONNX `metadata_props` (one key per field, each value a JSON
string), into TorchScript's `metadata.json` extra file and into `export/metadata.json`.
This module imports neither torch nor the task stack: the deploy side reads it with only
onnxruntime installed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

FORMAT_VERSION = 1
"""Bumped when a field changes meaning; readers refuse newer versions."""

INPUT_NAME = "obs"
OUTPUT_NAME = "actions"


class MetadataError(ValueError):
    """Exported-policy metadata that is missing, malformed or of an unknown version."""


@dataclass(frozen=True)
class PolicyMetadata:
    task: str
    """Registered task name the policy was trained on."""
    robot: str
    algorithm: str
    joint_names: list[str]
    """Actuated joints in action order."""
    default_pose: list[float]
    kp: list[float]
    kd: list[float]
    action_scale: float
    """Position robots: joint target = default_pose + action_scale * action."""
    action_clip: float
    """The task clips actions to [-action_clip, action_clip] before applying them."""
    control_mode: str
    """position (PD targets) or force (motor commands)."""
    control_dt: float
    """Seconds between two actions."""
    joint_lower: list[float]
    joint_upper: list[float]
    obs_dims: dict[str, int]
    """Observation groups and their widths; the network reads `obs_group`."""
    action_dim: int
    obs_group: str = "policy"
    input_groups: dict[str, str] = field(default_factory=dict)
    """Graph input name -> the observation group it takes; empty (files written before it
    existed) means one input `obs` taking `obs_group`."""
    action_horizon: int = 1
    """H, actions per chunk. The graph's `actions` output is (batch, action_dim) for H = 1
    and (batch, H, action_dim) for H > 1."""
    obs_names: dict[str, list[str]] = field(default_factory=dict)
    """Per group, the name of each observation entry, where the task provides them."""
    task_config: dict[str, Any] = field(default_factory=dict)
    """The run's task section, enough to rebuild the same task for play and SimRobot."""
    sim_config: dict[str, Any] = field(default_factory=dict)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    """file, iteration and env_steps of the checkpoint the weights come from."""
    max_action_delta: float | None = None
    """Deploy: largest change of an action entry between two control steps (policy units);
    None: not rate-limited."""
    obs_bounds: dict[str, list[list[float]]] = field(default_factory=dict)
    """Deploy: per observation group, [low, high] (each a number or one per entry); an
    observation outside them stops the deploy loop."""
    unilab_version: str = ""
    format_version: int = FORMAT_VERSION

    @property
    def obs_dim(self) -> int:
        return self.obs_dims[self.obs_group]

    @property
    def graph_inputs(self) -> dict[str, str]:
        """Graph input name -> observation group, in input order."""
        return dict(self.input_groups) or {INPUT_NAME: self.obs_group}

    def to_props(self) -> dict[str, str]:
        """One JSON string per field, for ONNX metadata_props."""
        return {f.name: json.dumps(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_props(cls, props: dict[str, str], source: str = "policy") -> PolicyMetadata:
        """Parse `to_props` output; errors name the source file and the bad key."""
        if "format_version" not in props:
            raise MetadataError(
                f"{source} has no unilab metadata (no 'format_version' key); export it with "
                "`unilab export <run dir>`"
            )
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in props:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise MetadataError(f"{source}: metadata key {f.name!r} is missing")
                continue
            try:
                values[f.name] = json.loads(props[f.name])
            except json.JSONDecodeError as exc:
                raise MetadataError(f"{source}: metadata {f.name!r} is not JSON: {exc}") from None
        version = int(values["format_version"])
        if version > FORMAT_VERSION:
            raise MetadataError(
                f"{source}: metadata format {version} is newer than this unilab reads "
                f"({FORMAT_VERSION}); upgrade unilab"
            )
        meta = cls(**values)
        if meta.obs_group not in meta.obs_dims:
            raise MetadataError(
                f"{source}: obs_group {meta.obs_group!r} is not among obs_dims {meta.obs_dims}"
            )
        unknown = sorted(set(meta.graph_inputs.values()) - set(meta.obs_dims))
        if unknown:
            raise MetadataError(
                f"{source}: input_groups name groups {unknown} that are not among obs_dims "
                f"{sorted(meta.obs_dims)}"
            )
        if meta.action_horizon < 1:
            raise MetadataError(f"{source}: action_horizon {meta.action_horizon} must be >= 1")
        return meta

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)
