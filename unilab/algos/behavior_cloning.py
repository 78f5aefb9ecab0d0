"""What `bc_flow` and `bc_mse` share: imitation of action chunks from stored frames.

`update(batch)` takes one batch of frames as `FrameDataset(action_horizon=H).batch(...)`
returns it, on the learner's device: store field names (`obs/policy`, `images/<cam>`,
`obs/instruction`, `token`, ...), `action` (B, H, A) and `action_is_pad` (B, H). It maps the
fields to the policy's observation groups, augments the images on the device (random
shift, colour jitter), takes one AdamW step on the policy's loss (padded chunk rows masked
out) with warm-up + cosine learning rate and gradient clipping, and updates the EMA copy.
The EMA copy is `actor`: what is published, evaluated and exported.

`validate(batch)` scores the EMA policy without augmentation or condition dropout, with a
fixed random stream (comparable across calls): the training loss and the error of a sampled
chunk against the demonstrated one (normalized units, padding masked), the metric both
heads share. With value heads (`value_weight` > 0) it also scores them on the held-out
frames: the Brier score of P(success), and the progress and time-to-go absolute errors
where they are defined. `unilab.algos.offline.train_offline` runs the whole offline loop.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from unilab.algos.base import Algorithm
from unilab.algos.success_calibration import calibrate_success
from unilab.config.checks import checked
from unilab.config.schema import AlgoConfig
from unilab.policies.vla.augment import AugmentConfig, augment_images, vector_noise
from unilab.policies.vla.config import VLAConfig, VLAInputs, inputs_from_shapes
from unilab.policies.vla.policy import VLAPolicy
from unilab.policies.vla.training_loss import value_heads_loss
from unilab.policies.vla.value_heads import (
    TARGET_NAMES,
    TARGET_PREFIX,
    ValueTargets,
    value_metrics,
    value_sums,
)

VAL_SEED = 12345


@dataclass
class BCConfig(AlgoConfig):
    name: str = "bc"
    model: VLAConfig = field(default_factory=VLAConfig)
    """The network (sizes, H, K, conditions)."""
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    """Image augmentation on the learner device."""
    steps: int = 20000
    """Gradient steps of offline training (the learning-rate schedule spans them)."""
    batch_size: int = 64
    """Frames (each with its action chunk) per gradient step."""
    lr: float = 3e-4
    """Peak AdamW learning rate."""
    lr_min_ratio: float = 0.1
    """The cosine schedule ends at lr * lr_min_ratio."""
    warmup_steps: int = 200
    """Linear learning-rate warm-up."""
    weight_decay: float = 1e-4
    """AdamW weight decay (matrices only; not norms, biases, embeddings of positions)."""
    max_grad_norm: float = 1.0
    """Gradient norm clip (0: off)."""
    ema_decay: float = 0.999
    """EMA of the weights; the EMA copy is exported and evaluated. Ramps up as
    min(ema_decay, (1 + step) / (10 + step))."""
    val_fraction: float = 0.1
    """Episodes held out for validation (split by episode, deterministic for a seed)."""
    val_every: int = 500
    """Validate every this many steps (and at the end)."""
    val_max_frames: int = 1024
    """Held-out frames scored per validation (evenly spread over the held-out episodes)."""
    vocab_size: int = checked(0, ge=0)
    """Instruction vocabulary size; 0 (the default) takes the task's shipped vocabulary
    (`Task.vocabulary`) when the config is composed. Tasks without instructions: unused."""
    pad_id: int = 0
    """Padding word id of the vocabulary."""
    proprio_field: str = "obs/policy"
    """Store field of the proprioception group."""
    instruction_field: str = "obs/instruction"
    """Store field of the instruction word ids."""
    tokens: int = checked(0, ge=0)
    """Exploration tokens K (`unilab data tokens` writes them into the store's `token`
    column): sets `model.n_tokens`; 0 leaves `model.n_tokens` as it is."""
    token_field: str = "token"
    """Store field of the behaviour token (read when model.n_tokens > 0)."""
    advantage_field: str = ""
    """Store field of the advantage indicator (read when model.advantage; '' = null)."""
    state_weight: float = checked(0.0, ge=0.0)
    """Weight of the auxiliary loss that predicts the privileged object state from the
    prefix (`policies/vla/state_head.py`); 0: no state head. Needs `state_field` in the
    store (`unilab collect` stores the task's `critic` group as `obs/critic`)."""
    state_field: str = "obs/critic"
    """Store field of the state-head target (the task's `critic` observation group)."""
    value_weight: float = checked(0.0, ge=0.0)
    """Weight of the value heads' losses (P(success), progress, time to go from episode
    outcomes; `policies/vla/value_heads.py`) beside the action loss; 0: no value heads.
    > 0 builds the heads (`model.value_heads`) and needs every episode's success metadata
    in the store."""
    calibrate_success: bool = True
    """With value heads: after training, Platt-scale P(success) on the held-out episodes
    (`unilab.algos.success_calibration`); off: the raw head."""
    calibration_max_frames: int = checked(20000, ge=1)
    """Held-out frames the calibration reads at most (evenly spread over all of them)."""

    def adopt_task(self, vocabulary: tuple[str, ...]) -> list[str]:
        """Called by `compose`: the vocabulary size comes from the task's own words."""
        if vocabulary and self.vocab_size == 0:
            self.vocab_size = len(vocabulary)
        if self.tokens:
            if self.model.n_tokens not in (0, self.tokens):
                return [
                    f"tokens={self.tokens} disagrees with model.n_tokens="
                    f"{self.model.n_tokens}: set one of them"
                ]
            self.model.n_tokens = self.tokens
        return []

    def problems(self) -> list[str]:
        """Checks across fields (`compose` prefixes them with `algo.`)."""
        out = []
        try:
            self.model.validate()
        except ValueError as exc:
            out.append(f"model: {exc}")
        if not 0.0 <= self.val_fraction < 1.0:
            out.append(f"val_fraction={self.val_fraction} must be in [0, 1)")
        for name in ("steps", "batch_size", "val_every", "val_max_frames"):
            if getattr(self, name) < 1:
                out.append(f"{name}={getattr(self, name)} must be at least 1")
        return out


def model_config(cfg: Any) -> VLAConfig:
    """`cfg.model`, with the value heads on when `cfg.value_weight` > 0 (so a checkpoint's
    config rebuilds the same network)."""
    model: VLAConfig = cfg.model
    if float(getattr(cfg, "value_weight", 0.0)) > 0 and not model.value_heads:
        model = dataclasses.replace(model, value_heads=True)
    return model


def state_dim_of(cfg: BCConfig, obs_dims: Mapping[str, Any]) -> int:
    """Width of the state head's target: the task's `critic` group when `state_weight` > 0
    (0: no state head)."""
    if cfg.state_weight <= 0 or "critic" not in obs_dims:
        return 0
    dims = obs_dims["critic"]
    dims = getattr(dims, "shape", dims)
    return int(dims) if isinstance(dims, int) else int(next(iter(dims)))


class BehaviorCloning(Algorithm):
    """Offline imitation of action chunks (base of bc_flow and bc_mse)."""

    head: ClassVar[str] = "flow"
    off_policy: ClassVar[bool] = True
    offline: ClassVar[bool] = True
    """Learns from a store, not from rollouts (the Runner's offline loop)."""
    shaped_obs: ClassVar[bool] = True
    """Built from every observation group's shape (cameras, instruction length)."""
    uses_logprob: ClassVar[bool] = False

    def __init__(
        self,
        cfg: BCConfig,
        obs_dims: Mapping[str, Any],
        action_dim: int,
        device: torch.device,
        inputs: VLAInputs | None = None,
    ) -> None:
        obs_widths = {k: v for k, v in obs_dims.items() if isinstance(v, int)}  # base's view
        super().__init__(cfg, obs_widths, action_dim, device)
        self.cfg: BCConfig = cfg
        self.inputs = inputs or inputs_from_shapes(obs_dims, action_dim, cfg.vocab_size, cfg.pad_id)
        self.state_dim = state_dim_of(cfg, obs_dims)
        self.policy = VLAPolicy(self.inputs, model_config(cfg), self.head, self.state_dim).to(
            device
        )
        self.actor: VLAPolicy = copy.deepcopy(self.policy).requires_grad_(False).eval()
        decay: list[torch.Tensor] = []
        no_decay: list[torch.Tensor] = []
        for name, p in self.policy.named_parameters():
            (decay if p.dim() >= 2 and "pos" not in name.split(".")[-1] else no_decay).append(p)
        self.optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": cfg.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=cfg.lr,
            fused=True,  # one kernel for all parameters (CPU and CUDA): small nets are op-bound
        )
        self._params: list[torch.Tensor] = list(self.policy.parameters())
        self._ema_params: list[torch.Tensor] = list(self.actor.parameters())
        self._pairs_buffers = list(zip(self.actor.buffers(), self.policy.buffers(), strict=True))
        self.step = 0
        self.generator = torch.Generator()
        self.generator.manual_seed(0)

    @classmethod
    def build_actor(cls, cfg: Any, obs_dims: Mapping[str, Any], action_dim: int) -> VLAPolicy:
        inputs = inputs_from_shapes(obs_dims, action_dim, cfg.vocab_size, cfg.pad_id)
        return VLAPolicy(inputs, model_config(cfg), cls.head, state_dim_of(cfg, obs_dims))

    def seed(self, seed: int) -> None:
        """Seed the learner's own random stream (noise, times, dropout, augmentation)."""
        self.generator.manual_seed(int(seed))

    @classmethod
    def frame_options(cls, cfg: Any) -> dict[str, Any]:
        """How a `FrameDataset` must cut the store for this learner: action chunks of H
        (and the value heads' outcome targets when `value_weight` > 0)."""
        options: dict[str, Any] = {"action_horizon": int(cfg.model.horizon)}
        if float(getattr(cfg, "value_weight", 0.0)) > 0:
            options["outcome_targets"] = True
        return options

    # -- frames -> observation groups ---------------------------------------------------
    def group_fields(self) -> dict[str, str]:
        """Policy observation group -> the store field it is read from."""
        cfg, spec = self.cfg, self.inputs
        wanted: dict[str, str] = {}
        if spec.proprio_dim:
            wanted["policy"] = cfg.proprio_field
        for cam in spec.cameras:
            wanted[f"images/{cam}"] = f"images/{cam}"
        if spec.vocab_size:
            wanted["instruction"] = cfg.instruction_field
        if cfg.model.n_tokens:
            wanted["token"] = cfg.token_field
        if cfg.model.advantage and cfg.advantage_field:
            wanted["advantage"] = cfg.advantage_field
        return wanted

    def required_fields(self) -> dict[str, tuple[int, ...]]:
        """Batch entries a training batch must hold, with each item's shape: the store
        fields of `group_fields` and the action chunk (H, A)."""
        spec = self.inputs
        shapes: dict[str, tuple[int, ...]] = {}
        for group, name in self.group_fields().items():
            if group == "policy":
                shapes[name] = (spec.proprio_dim,)
            elif group.startswith("images/"):
                h, w = spec.cameras[group.removeprefix("images/")]
                shapes[name] = (h, w, 3)
            elif group == "instruction":
                shapes[name] = (spec.instruction_len,)
            else:
                shapes[name] = ()
        shapes["action"] = (self.cfg.model.horizon, spec.action_dim)
        if self.state_dim:
            shapes[self.cfg.state_field] = (self.state_dim,)
        if self.cfg.value_weight > 0:
            shapes.update({TARGET_PREFIX + name: () for name in TARGET_NAMES})
        return shapes

    def observations(
        self, batch: Mapping[str, torch.Tensor], augment: bool
    ) -> dict[str, torch.Tensor]:
        cfg, spec = self.cfg, self.inputs
        wanted = self.group_fields()
        missing = sorted(f for f in wanted.values() if f not in batch)
        if missing:
            raise KeyError(
                f"the batch has no field(s) {missing} (needed by the policy's inputs); it has "
                f"{sorted(batch)}"
            )
        obs = {
            group: batch[name].to(self.device, non_blocking=True) for group, name in wanted.items()
        }
        if augment:
            for cam in spec.cameras:
                key = f"images/{cam}"
                obs[key] = augment_images(obs[key], cfg.augment, self.generator)
            if "policy" in obs:
                obs["policy"] = vector_noise(
                    obs["policy"].to(torch.float32), cfg.augment.vector_noise, self.generator
                )
        return obs

    def _chunks(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        if "action" not in batch or batch["action"].dim() != 3:
            raise KeyError(
                "a BC batch needs `action` chunks (B, H, A): build the FrameDataset with "
                f"action_horizon={self.cfg.model.horizon}"
            )
        actions = batch["action"].to(self.device, torch.float32)
        if actions.shape[1] != self.cfg.model.horizon:
            raise ValueError(
                f"action chunks have H={actions.shape[1]}; the model predicts "
                f"H={self.cfg.model.horizon} (FrameDataset action_horizon must match)"
            )
        pad = batch.get("action_is_pad")
        is_pad = (
            torch.zeros(actions.shape[:2], dtype=torch.bool, device=self.device)
            if pad is None
            else pad.to(self.device)
        )
        return actions, is_pad

    def _state(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """The state-head target of a batch (None without a state head)."""
        if not self.state_dim:
            return None
        name = self.cfg.state_field
        if name not in batch:
            raise KeyError(
                f"the batch has no field {name!r} (algo.state_weight > 0 needs the privileged "
                f"state); it has {sorted(batch)}. Set algo.state_weight=0 or algo.state_field"
            )
        return batch[name].to(self.device, torch.float32)

    def _value_targets(self, batch: Mapping[str, torch.Tensor]) -> ValueTargets | None:
        """The value heads' targets of a batch (None when `value_weight` is 0)."""
        if self.cfg.value_weight <= 0:
            return None
        try:
            return ValueTargets.from_batch(batch, self.device)
        except KeyError as exc:
            raise KeyError(
                f"algo.value_weight={self.cfg.value_weight} > 0: {exc.args[0]}"
            ) from None

    # -- learning -----------------------------------------------------------------------
    @torch.no_grad()
    def fit_normalizers(self, batch: Mapping[str, torch.Tensor]) -> None:
        """Set proprioception and action statistics (and the value heads' time scale) from a
        (large) batch of frames."""
        actions, is_pad = self._chunks(batch)
        proprio = None
        if self.inputs.proprio_dim:
            proprio = batch[self.cfg.proprio_field].to(self.device, torch.float32)
        self.policy.fit_normalizers(
            proprio, actions[~is_pad], self._state(batch), self._value_targets(batch)
        )
        self.actor.load_state_dict(self.policy.state_dict())

    def learning_rate(self, step: int) -> float:
        cfg = self.cfg
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        span = max(1, cfg.steps - cfg.warmup_steps)
        frac = min(1.0, (step - cfg.warmup_steps) / span)
        low = cfg.lr * cfg.lr_min_ratio
        return low + 0.5 * (cfg.lr - low) * (1.0 + math.cos(math.pi * frac))

    def update(
        self, batch: dict[str, torch.Tensor], value_batch: dict[str, torch.Tensor] | None = None
    ) -> dict[str, float]:
        """One gradient step on a batch of frames with action chunks; -> metrics. With
        `value_batch`, the value heads learn from those frames instead of `batch`'s."""
        self.policy.train()
        actions, is_pad = self._chunks(batch)
        obs = self.observations(batch, augment=True)
        loss, metrics = self.policy.loss(
            obs,
            actions,
            is_pad,
            self.generator,
            state=self._state(batch),
            state_weight=self.cfg.state_weight,
            value_targets=self._value_targets(batch) if value_batch is None else None,
            value_weight=self.cfg.value_weight,
        )
        if value_batch is not None and (targets := self._value_targets(value_batch)) is not None:
            value_obs = self.observations(value_batch, augment=True)
            value_loss, value_metrics = value_heads_loss(self.policy, value_obs, targets)
            loss = loss + self.cfg.value_weight * value_loss
            metrics = {**metrics, **value_metrics}
        lr = self.learning_rate(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.zeros(())
        if self.cfg.max_grad_norm > 0:
            grad_norm = nn.utils.clip_grad_norm_(self._params, self.cfg.max_grad_norm)
        self.optimizer.step()
        self._update_ema()
        self.step += 1
        out = {k: float(v) for k, v in metrics.items()}
        out.update(loss=float(loss.detach()), lr=lr, grad_norm=float(grad_norm))
        return out

    @torch.no_grad()
    def _update_ema(self) -> None:
        decay = min(self.cfg.ema_decay, (1.0 + self.step) / (10.0 + self.step))
        torch._foreach_lerp_(self._ema_params, self._params, 1.0 - decay)
        for ema_b, b in self._pairs_buffers:
            ema_b.copy_(b)

    @torch.no_grad()
    def validate(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Summed validation errors of the EMA policy on a batch (see module doc):
        {"loss_sum", "action_sq_sum", "elements", "frames"} (and with value heads the sums
        of `value_sums`) as tensors, so callers can pool several batches before dividing."""
        policy = self.actor.eval()
        gen = torch.Generator()
        gen.manual_seed(VAL_SEED)
        actions, is_pad = self._chunks(batch)
        obs = self.observations(batch, augment=False)
        loss, _ = policy.loss(obs, actions, is_pad, gen, drop_conditions=False)
        noise = policy.draw_noise(actions.shape[0], gen)
        sampled = policy.sample(obs, deterministic=True, noise=noise)[0]
        keep = (~is_pad)[..., None].expand_as(actions).to(torch.float32)
        err = (
            policy.action_norm.normalize(sampled) - policy.action_norm.normalize(actions)
        ).square()
        elements = keep.sum()
        sums = {
            "loss_sum": loss * elements,
            "action_sq_sum": (err * keep).sum(),
            "elements": elements,
            "frames": torch.tensor(float(actions.shape[0])),
        }
        targets = self._value_targets(batch)
        if targets is not None:
            sums.update(value_sums(policy.predict_values(obs), targets))
        return sums

    def validation_metrics(self, sums: Mapping[str, float]) -> dict[str, float]:
        """Pooled `validate` sums -> `val_loss`, `val_action_mse`, `val_frames` (and with
        value heads `val_success_brier`, `val_success_rate`, `val_progress_mae`,
        `val_ttg_mae` in seconds)."""
        elements = max(sums["elements"], 1.0)
        out = {
            "val_loss": sums["loss_sum"] / elements,
            "val_action_mse": sums["action_sq_sum"] / elements,
            "val_frames": sums["frames"],
        }
        if "success_sq_sum" in sums:
            out.update(value_metrics(sums))
        return out

    def value_observations(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The policy inputs the value heads are calibrated on (no augmentation)."""
        return self.observations(batch, augment=False)

    def calibrate_values(self, frames: Any, items: np.ndarray) -> dict[str, float]:
        """Platt-scale P(success) on held-out `items` (the offline loop calls it after
        training; `unilab.algos.success_calibration`); {} without value heads or with
        `calibrate_success` off."""
        if self.cfg.value_weight <= 0 or not self.cfg.calibrate_success or items.size == 0:
            return {}
        return calibrate_success(
            [self.actor, self.policy],
            frames,
            items,
            self.value_observations,
            batch_size=self.cfg.batch_size,
            max_frames=self.cfg.calibration_max_frames,
            device=self.device,
        )

    def reset_calibration(self) -> None:
        """Back to the raw P(success) (training moves the weights a calibration was fit on)."""
        for policy in (self.actor, self.policy):
            if policy.value_heads is not None:
                policy.value_heads.set_success_calibration(1.0, 0.0)

    # -- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "actor": self.actor.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.actor.load_state_dict(state["actor"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.generator.set_state(state["generator"])
