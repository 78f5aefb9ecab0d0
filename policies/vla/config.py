"""What a VLA looks like: its inputs (`VLAInputs`, fixed by the task) and its sizes
(`VLAConfig`, a config section). Plain dataclasses, no torch: the export metadata and the
torch-free deploy side read them too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CONDITIONS = ("token", "advantage")
"""Optional conditioning inputs; each has a null value that drops it."""


@dataclass
class VLAConfig:
    """Sizes and conditioning of the VLA. The defaults train on a 2-core CPU in minutes and
    run a chunk in a few ms at batch 1 (docs/decisions/0041-vla-architecture.md); on a GPU,
    raise `width`, the depths and `horizon` without any other change."""

    horizon: int = 16
    """H: actions per predicted chunk."""
    num_steps: int = 10
    """K: Euler steps from noise (t = 1) to actions (t = 0) at inference."""
    n_act: int = 8
    """Actions of each chunk executed before re-planning (chunked execution)."""
    ensemble_decay: float | None = None
    """Temporal ensembling at execution (ACT): every prediction of the current step's action
    is averaged with weight exp(-m * i), i = 0 the oldest; None: off (execute `n_act`
    actions of a chunk, then re-plan). Use with a small n_act (ACT re-plans every step)."""
    width: int = 128
    """Token width of the prefix transformer and the action expert."""
    heads: int = 4
    """Attention heads (width must be divisible by heads)."""
    prefix_layers: int = 2
    """Transformer layers fusing image, proprioception and instruction tokens."""
    expert_layers: int = 2
    """Action-expert layers (self-attention over the chunk, cross-attention to the prefix)."""
    mlp_ratio: int = 4
    """Hidden width of every MLP block as a multiple of `width`."""
    image_channels: list[int] = field(default_factory=lambda: [16, 32, 64, 128])
    """Channels of the stride-2 conv stages of each camera's encoder."""
    image_tokens_side: int = 4
    """Each camera becomes side x side tokens (feature map average-pooled to this grid)."""
    image_keypoints: int = 0
    """Spatial soft-argmax keypoints per camera (0: none): K expected (x, y) positions of
    learned features, one stage before the last, entering as `image_keypoint_tokens` more
    tokens (precise positions the pooled grid lacks)."""
    image_keypoint_tokens: int = 1
    """Tokens the keypoints of one camera become (K must split evenly among them)."""
    n_tokens: int = 0
    """Discrete behaviour tokens (0: no token input). Index n_tokens is the null token."""
    token_dropout: float = 0.2
    """Training probability of replacing the behaviour token by the null token."""
    advantage: bool = False
    """Input a binary advantage indicator (RECAP): 0 negative, 1 positive, -1 null."""
    advantage_dropout: float = 0.3
    """Training probability of replacing the advantage indicator by null."""
    guidance_scale: float | None = None
    """Classifier-free guidance v = v_u + s (v_c - v_u) at inference; None: conditional only."""
    guidance_drop: list[str] = field(default_factory=lambda: ["advantage"])
    """Conditions nulled in the unconditional branch of guidance (token, advantage)."""
    inference_advantage: int | None = None
    """The advantage indicator the policy reads when an observation carries none (play,
    eval, rollouts, deploy): 1 acts as the positive-advantage policy (what `awr_flow` sets:
    RECAP), None: null. An explicit `advantage` input (training batches, -1) wins."""
    rollout_tokens: bool = False
    """Rollouts explore under one behaviour token per episode, drawn per env from the
    `token_sampler.probs` the learner publishes (`flow_ppo` with `n_tokens` > 0)."""
    token_selector: bool = False
    """Add `TokenSelector`: picks the token from the observation wherever none is given
    (deployment, evaluation); trained by `flow_ppo` from its rollouts."""
    selector_holds_token: bool = True
    """Chunked execution (play, eval, deploy) keeps the selector's token for the whole
    episode, chosen at its first chunk, as rollouts explore under one token per episode;
    false: the selector chooses again at every chunk."""
    flow_noise: bool = False
    """Add a noise head: sampling adds learned Gaussian noise at each Euler step, so the
    K-step chain has an exact log-probability (ReinFlow-style, for RL fine-tuning)."""
    noise_std_min: float = 0.08
    """Lower bound of the per-step noise std (normalized action units)."""
    noise_std_max: float = 0.16
    """Upper bound of the per-step noise std."""
    value_heads: bool = False
    """Add `ValueHeads` (policies/vla/value_heads.py): P(success), progress and time to go
    predicted from the prefix, trained from episode outcomes (`algo.value_weight` > 0
    turns this on). Off: the network and its checkpoints are as before; export never
    traces them."""

    def validate(self) -> None:
        problems = []
        for name in ("horizon", "num_steps", "n_act", "width", "heads", "mlp_ratio"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.width % max(self.heads, 1):
            problems.append(f"width {self.width} is not divisible by heads {self.heads}")
        if self.n_act > self.horizon:
            problems.append(f"n_act {self.n_act} exceeds the chunk horizon {self.horizon}")
        if self.prefix_layers < 0 or self.expert_layers < 1:
            problems.append("need prefix_layers >= 0 and expert_layers >= 1")
        if not self.image_channels or min(self.image_channels) < 1:
            problems.append(f"image_channels must be positive widths, got {self.image_channels}")
        if self.image_tokens_side < 1:
            problems.append(f"image_tokens_side must be >= 1, got {self.image_tokens_side}")
        if self.image_keypoints < 0 or self.image_keypoint_tokens < 1:
            problems.append(
                f"need image_keypoints >= 0 and image_keypoint_tokens >= 1, got "
                f"{self.image_keypoints}, {self.image_keypoint_tokens}"
            )
        elif self.image_keypoints % self.image_keypoint_tokens:
            problems.append(
                f"image_keypoints {self.image_keypoints} must split evenly into "
                f"image_keypoint_tokens {self.image_keypoint_tokens}"
            )
        if self.n_tokens < 0:
            problems.append(f"n_tokens must be >= 0, got {self.n_tokens}")
        for name in ("token_dropout", "advantage_dropout"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                problems.append(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.inference_advantage not in (None, -1, 0, 1):
            problems.append(
                f"inference_advantage must be 1, 0, -1 or None, got {self.inference_advantage}"
            )
        bad = [c for c in self.guidance_drop if c not in CONDITIONS]
        if bad:
            problems.append(f"guidance_drop {bad} not among {list(CONDITIONS)}")
        if not 0.0 < self.noise_std_min <= self.noise_std_max:
            problems.append(
                f"need 0 < noise_std_min <= noise_std_max, got {self.noise_std_min}, "
                f"{self.noise_std_max}"
            )
        if problems:
            raise ValueError("invalid VLA config: " + "; ".join(problems))


@dataclass(frozen=True)
class VLAInputs:
    """The observations and actions a VLA is built for (given by the task)."""

    proprio_dim: int
    """Width of the `policy` (proprioception) group; 0: none."""
    action_dim: int
    """Action width per step."""
    cameras: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Camera name -> (height, width); observations carry `images/<name>` uint8 (N, H, W, 3)."""
    vocab_size: int = 0
    """Instruction vocabulary size (0: no instruction input)."""
    pad_id: int = 0
    """Id of the padding word in instructions (masked out)."""
    instruction_len: int = 0
    """Words per instruction (ids padded with pad_id to this length)."""

    def validate(self) -> None:
        problems = []
        if self.action_dim < 1:
            problems.append(f"action_dim must be >= 1, got {self.action_dim}")
        if self.proprio_dim < 0:
            problems.append(f"proprio_dim must be >= 0, got {self.proprio_dim}")
        for cam, hw in self.cameras.items():
            if len(hw) != 2 or min(hw) < 1:
                problems.append(f"camera {cam!r}: size must be (height, width), got {hw}")
        if self.vocab_size and not 0 <= self.pad_id < self.vocab_size:
            problems.append(
                f"pad_id {self.pad_id} is outside the vocabulary [0, {self.vocab_size})"
            )
        if self.vocab_size and self.instruction_len < 1:
            problems.append("an instruction vocabulary needs instruction_len >= 1")
        if not (self.proprio_dim or self.cameras or self.vocab_size):
            problems.append("a VLA needs at least one of proprioception, cameras, instruction")
        if problems:
            raise ValueError("invalid VLA inputs: " + "; ".join(problems))

    @property
    def obs_keys(self) -> list[str]:
        """Observation keys the policy reads, in a fixed order."""
        keys = ["policy"] if self.proprio_dim else []
        keys += [f"images/{cam}" for cam in self.cameras]
        if self.vocab_size:
            keys.append("instruction")
        return keys

    def to_json(self) -> dict[str, Any]:
        return {
            "proprio_dim": self.proprio_dim,
            "action_dim": self.action_dim,
            "cameras": {k: list(v) for k, v in self.cameras.items()},
            "vocab_size": self.vocab_size,
            "pad_id": self.pad_id,
            "instruction_len": self.instruction_len,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> VLAInputs:
        cams = {str(k): (int(v[0]), int(v[1])) for k, v in doc.get("cameras", {}).items()}
        return cls(
            proprio_dim=int(doc["proprio_dim"]),
            action_dim=int(doc["action_dim"]),
            cameras=cams,
            vocab_size=int(doc.get("vocab_size", 0)),
            pad_id=int(doc.get("pad_id", 0)),
            instruction_len=int(doc.get("instruction_len", 0)),
        )


def inputs_from_shapes(
    obs_shapes: Mapping[str, Any], action_dim: int, vocab_size: int = 0, pad_id: int = 0
) -> VLAInputs:
    """VLA inputs from observation shapes: `policy` -> d or (d,), `images/<cam>` ->
    (H, W, 3), `instruction` -> L or (L,); a value may also be an object with a `shape`
    (a task's `ObsSpec`). Other groups (`critic`, `depth/<cam>`) are ignored."""

    def dims_of(v: Any) -> tuple[int, ...]:
        v = getattr(v, "shape", v)
        return (int(v),) if isinstance(v, int) else tuple(int(s) for s in v)

    def width(v: Any) -> int:
        return dims_of(v)[0]

    cams = {}
    for key, shape in obs_shapes.items():
        if key.startswith("images/"):
            dims = dims_of(shape)
            if len(dims) != 3 or dims[2] != 3:
                raise ValueError(f"{key}: camera shape must be (H, W, 3), got {dims}")
            cams[key.removeprefix("images/")] = (dims[0], dims[1])
    return VLAInputs(
        proprio_dim=width(obs_shapes["policy"]) if "policy" in obs_shapes else 0,
        action_dim=int(action_dim),
        cameras=cams,
        vocab_size=vocab_size if "instruction" in obs_shapes else 0,
        pad_id=pad_id,
        instruction_len=width(obs_shapes["instruction"]) if "instruction" in obs_shapes else 0,
    )
