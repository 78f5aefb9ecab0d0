"""`awr_flow`: offline improvement of the flow VLA from a store of mixed sources, with the
policy as its own value function (issue 16, the LeHome 2026 recipe; decisions 0122, 0123).

The learner is `bc_flow` (same loss, augmentation, EMA, validation, checkpoints) with three
changes, all made before or around the unchanged gradient step:

1. **Advantages, once, before training** (`prepare_frames`, called by the offline loop with
   the store's frames): per episode, the return (`episode_return`: success 1/0, or the summed
   reward) minus the mean return of the episodes of the same task (episode metadata `task`);
   blended with GAE over the policy's own predicted success (or expected progress) when the
   init run has value heads, with weight `min(gae_weight_max, gae_weight_step * iteration)`
   (the heads are trusted more each improvement round); clipped to [-clip, clip]; frames of
   demonstration sources (`demo_sources`) and human interventions (`is_intervention`) get the
   fixed `demo_advantage`. `unilab.algos.frame_advantages` computes them from the store's
   frames (`FrameTable`, `compute_advantages`); `unilab.algos.advantages` holds the formulas.
2. **AWR by sampling** (`draw_items`, which the offline loop uses instead of uniform draws):
   each frame's source is its origin (`sim`, `real`, `human`, `wm`), except frames of origin
   `sim` that no learned policy produced (`policy_version` < 0: `unilab collect`'s scripted
   experts), whose source is `expert`, and intervention frames (a takeover's, in any
   origin), whose source is `human`. Within a source, frame i is drawn with probability
   exp(clip(A_i) / beta) / Z; sources hold `shares` of each batch, moved `iteration` times
   toward `floors` by `share_decay` (`unilab.algos.awr_sampling.AWRSampler`). The batch of
   step s depends only on (seed, s): resume stays bit-exact. The value heads learn from a
   uniform batch of their own (`value_batch_size`): the weighted batch holds too few
   failures for outcome targets.
3. **RECAP**: the VLA's `advantage` condition (model.advantage, switched on here) reads a
   binary indicator drawn per batch from each frame's advantage: 1 if A > 0, else 0, masked
   to null with a probability that falls from `recap_null_max` (A <= 0) to `recap_null_min`
   (A >= `recap_full_advantage`). The model's own `advantage_dropout` is set to 0 (no double
   masking). At inference the indicator is always positive: `model.inference_advantage` = 1
   is what play, eval, rollouts and the exported graph's runner feed when nobody gives one,
   with classifier-free guidance v = v_u + s (v_c - v_u) when `guidance_scale` is set.

`init=<bc_flow or awr_flow run>` starts from that run's EMA weights and model settings
(adopted at compose time as `flow_ppo` does; `model_from` records it). The advantage
condition and, with `value_weight` > 0, value heads that the init lacks start fresh (zero
embeddings: the unconditional policy). The init's normalizers are kept: its weights were
trained on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.algos import advantages as adv
from unilab.algos.awr_sampling import AWRSampler
from unilab.algos.behavior_cloning import BCConfig, BehaviorCloning
from unilab.algos.flow_ppo import checkpoint_file, init_algo_config
from unilab.algos.frame_advantages import (
    SOURCES,
    FrameTable,
    compute_advantages,
    frame_sources,
    gae_weight_at,
)
from unilab.algos.registry import register_algo
from unilab.config.checks import checked
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.utils.checkpoint import CheckpointError

ADVANTAGE_FIELD = "advantage"
"""Batch entry of the RECAP indicator (computed here; not a store column)."""

INIT_ALGOS = ("bc_flow", "awr_flow")
ADDED = ("prefix.advantage.", "value_heads.")
"""Parameters awr_flow may add to an init network (they start fresh)."""


@dataclass
class AWRFlowConfig(BCConfig):
    name: str = "awr_flow"
    init: str = ""
    """A `bc_flow` or `awr_flow` run directory (or checkpoint file) to start from: its EMA
    weights and model settings ('' = a fresh network)."""
    model_from: str = ""
    """Set at compose time to the `init` whose model settings `model` holds (a saved config
    never reads the init run again)."""
    iteration: int = checked(0, ge=0)
    """Improvement round this run is (0 = the first; `unilab improve` sets it): the source
    shares have decayed this many times and the GAE blend weight grows with it."""
    steps: int = checked(2000, ge=1)
    """Gradient steps (fine-tuning: fewer than imitation from scratch)."""
    lr: float = 1e-4
    """Peak AdamW learning rate (fine-tuning a trained flow)."""
    value_weight: float = checked(0.5, ge=0.0)
    """Weight of the value heads' losses (P(success), progress, time to go); > 0 trains the
    heads the next round's GAE reads (needs every episode's success metadata)."""
    value_batch_size: int = checked(64, ge=0)
    """Frames per step drawn uniformly over the training frames for the value heads' loss.
    Their targets are outcome frequencies, which the advantage-weighted batch distorts (at
    a small beta it holds nearly only successes, and P(success) learns 1 everywhere).
    0: the heads learn from the weighted batch."""
    beta: float = checked(1.0, gt=0.0)
    """AWR temperature: within a source, frames are drawn in proportion to exp(A / beta)."""
    clip: float = checked(2.0, gt=0.0)
    """Advantages are clipped to [-clip, clip] (bounds the weight ratio at exp(2 clip/beta))."""
    shares: dict[str, float] = field(
        default_factory=lambda: {"expert": 1.0, "human": 1.0, "sim": 1.0, "real": 1.0, "wm": 0.5}
    )
    """Starting share of each batch per source (expert, human, sim, real, wm); only the
    sources present in the store count, renormalised to sum 1."""
    floors: dict[str, float] = field(
        default_factory=lambda: {"expert": 0.1, "human": 0.2, "sim": 0.3, "real": 0.3, "wm": 0.0}
    )
    """Lower bounds the shares decay toward (each capped at its source's normalised starting
    share); the shares end at floor / sum(floors) of the present sources."""
    share_decay: float = checked(0.7, ge=0.0, le=1.0)
    """Per iteration, share <- floor + share_decay (share - floor), then renormalised."""
    episode_return: str = checked("success", choices=("success", "reward"))
    """The return of the early (per-task baseline) advantage: `success` (1 / 0 from the
    episode metadata; every episode needs it) or `reward` (the summed stored reward)."""
    gae_weight_step: float = checked(0.5, ge=0.0, le=1.0)
    """Blend weight of the GAE advantage per iteration: w = min(gae_weight_max,
    gae_weight_step x iteration), used only when the init run has value heads."""
    gae_weight_max: float = checked(1.0, ge=0.0, le=1.0)
    """Upper bound of the GAE blend weight."""
    value_signal: str = checked("success", choices=("success", "progress"))
    """V of the GAE: the predicted P(success), or the expected progress P(success) x progress."""
    gamma: float = checked(1.0, gt=0.0, le=1.0)
    """GAE discount per frame (1: the value heads predict undiscounted outcomes)."""
    lam: float = checked(0.95, ge=0.0, le=1.0)
    """GAE lambda."""
    demo_sources: list[str] = field(default_factory=lambda: ["expert", "human"])
    """Sources whose frames are demonstrations: fixed advantage `demo_advantage`
    (intervention frames get it too, whatever their source)."""
    demo_advantage: float = 1.0
    """The fixed advantage of demonstration and intervention frames."""
    recap_null_max: float = checked(adv.RECAP_NULL_MAX, ge=0.0, le=1.0)
    """Probability of nulling the indicator of frames with A <= 0."""
    recap_null_min: float = checked(adv.RECAP_NULL_MIN, ge=0.0, le=1.0)
    """Probability of nulling the indicator of frames with A >= recap_full_advantage."""
    recap_full_advantage: float = checked(adv.RECAP_FULL_ADVANTAGE, gt=0.0)
    """Advantage at which the nulling probability reaches recap_null_min (linear between)."""
    guidance_scale: float | None = None
    """Classifier-free guidance at inference, v = v_u + s (v_c - v_u) with the positive
    indicator as the condition (copied into `model.guidance_scale`); None: conditional only
    (s = 1 gives the same actions at twice the cost)."""

    def adopt_task(self, vocabulary: tuple[str, ...]) -> list[str]:
        """Called by `compose`: model settings from the init run, then RECAP's switches."""
        if self.init and self.model_from != self.init:
            try:
                doc = init_algo_config(Path(self.init))
            except (CheckpointError, FileNotFoundError, ValueError) as exc:
                return [f"init: {exc}"]
            if doc.get("name") not in INIT_ALGOS:
                return [
                    f"init: {self.init} is a {doc.get('name')!r} run; need one of "
                    f"{', '.join(INIT_ALGOS)}"
                ]
            model = dict(doc.get("model") or {})
            known = set(VLAConfig.__dataclass_fields__)
            self.model = VLAConfig(**{k: v for k, v in model.items() if k in known})
            if float(doc.get("value_weight", 0.0)) > 0:
                self.model.value_heads = True  # the init's network has them
            self.vocab_size = int(doc.get("vocab_size", self.vocab_size))
            self.pad_id = int(doc.get("pad_id", self.pad_id))
            self.model_from = self.init
        problems = super().adopt_task(vocabulary)
        self.model.advantage = True
        self.model.advantage_dropout = 0.0  # the indicator is masked here (recap_indicator)
        self.model.inference_advantage = adv.POSITIVE
        if self.guidance_scale is not None:
            self.model.guidance_scale = self.guidance_scale
        if "advantage" not in self.model.guidance_drop:
            self.model.guidance_drop = [*self.model.guidance_drop, "advantage"]
        self.advantage_field = ADVANTAGE_FIELD
        return problems

    def problems(self) -> list[str]:
        out = super().problems()
        for name in ("shares", "floors"):
            values: Mapping[str, float] = getattr(self, name)
            unknown = sorted(set(values) - set(SOURCES))
            if unknown:
                out.append(f"{name}: unknown source(s) {unknown}; sources: {list(SOURCES)}")
            bad = {k: v for k, v in values.items() if not (np.isfinite(v) and v >= 0)}
            if bad:
                out.append(f"{name}: values must be finite and >= 0, got {bad}")
        unknown = sorted(set(self.demo_sources) - set(SOURCES))
        if unknown:
            out.append(f"demo_sources: unknown source(s) {unknown}; sources: {list(SOURCES)}")
        if not self.recap_null_min <= self.recap_null_max:
            out.append(
                f"recap_null_min={self.recap_null_min} exceeds recap_null_max={self.recap_null_max}"
            )
        if not abs(self.demo_advantage) <= self.clip:
            out.append(f"demo_advantage={self.demo_advantage} lies outside [-clip, clip]")
        return out


@register_algo("awr_flow", AWRFlowConfig)
class AWRFlow(BehaviorCloning):
    """bc_flow with advantage-weighted sampling and the RECAP indicator (offline)."""

    head = "flow"

    def __init__(
        self,
        cfg: AWRFlowConfig,
        obs_dims: Mapping[str, Any],
        action_dim: int,
        device: torch.device,
        inputs: VLAInputs | None = None,
    ) -> None:
        super().__init__(cfg, obs_dims, action_dim, device, inputs)
        self.cfg: AWRFlowConfig = cfg
        self.fresh: set[str] = set()
        """Parameter groups (ADDED prefixes) the init lacked."""
        if cfg.init:
            self._load_init(Path(cfg.init))
        self.table: FrameTable | None = None
        self.frame_advantages: np.ndarray | None = None
        """(N,) advantage of every store frame (set by `prepare_frames` or a checkpoint)."""
        self.gae_weight = 0.0
        self.sampler: AWRSampler | None = None
        self.source_items: dict[str, np.ndarray] = {}
        self.stats: dict[str, float] = {}
        """Advantage and share statistics, added to every update's metrics."""
        self._seed = 0
        self._frames: Any = None
        self._value_items: np.ndarray = np.zeros(0, dtype=np.int64)
        """Training items the value heads' uniform batches come from (`value_batch`)."""

    # -- init -----------------------------------------------------------------------------
    def _load_init(self, init: Path) -> None:
        path, state = checkpoint_file(init)
        weights = state["algo"]["actor"]
        missing, unexpected = self.policy.load_state_dict(weights, strict=False)
        fresh = [k for k in missing if not k.startswith(ADDED)]
        if fresh or unexpected:
            raise ValueError(
                f"{path}: the init weights do not fit this policy (missing {fresh[:5]}, "
                f"unexpected {list(unexpected)[:5]}): the init run's model settings must match"
            )
        self.fresh = {p for p in ADDED if any(k.startswith(p) for k in missing)}
        self.actor.load_state_dict(self.policy.state_dict())

    @property
    def has_trained_values(self) -> bool:
        """The policy's value heads came trained from the init run (GAE can trust them)."""
        return (
            bool(self.cfg.init)
            and self.actor.value_heads is not None
            and "value_heads." not in self.fresh
        )

    @torch.no_grad()
    def fit_normalizers(self, batch: Mapping[str, torch.Tensor]) -> None:
        """A fresh network: as bc_flow. From an init run: keep its normalizers (its weights
        were trained on them); only fresh value heads get their time scale fitted."""
        if not self.cfg.init:
            super().fit_normalizers(batch)
            return
        targets = self._value_targets(batch)
        heads = self.policy.value_heads
        if targets is not None and heads is not None and "value_heads." in self.fresh:
            heads.fit_time_scale(targets.time_to_go, targets.has_progress)
            self.actor.load_state_dict(self.policy.state_dict())

    # -- advantages and the sampler -------------------------------------------------------
    def required_fields(self) -> dict[str, tuple[int, ...]]:
        """As bc_flow, less the indicator: it is computed here, not read from the store."""
        shapes = super().required_fields()
        shapes.pop(ADVANTAGE_FIELD, None)
        return shapes

    @torch.no_grad()
    def predict_frame_values(self, frames: Any, batch_size: int = 256) -> np.ndarray:
        """(N,) the EMA policy's V for every store frame (null advantage indicator):
        P(success), or P(success) x progress with `value_signal=progress`."""
        n = len(frames)
        out = np.zeros(n)
        for start in range(0, n, batch_size):
            items = np.arange(start, min(n, start + batch_size))
            batch = dict(frames.batch(items))
            batch[ADVANTAGE_FIELD] = torch.full((items.size,), adv.NULL, dtype=torch.int64)
            pred = self.actor.predict_values(self.observations(batch, augment=False))
            value = pred["success"]
            if self.cfg.value_signal == "progress":
                value = value * pred["progress"]
            out[items] = value.double().cpu().numpy()
        return out

    def prepare_frames(self, frames: Any, train_items: np.ndarray, seed: int) -> None:
        """Called by the offline loop before the first batch: advantages of every frame
        (kept from a checkpoint when resuming) and the sampler over the training items."""
        cfg = self.cfg
        table = FrameTable.from_frames(frames)
        indices = np.asarray(getattr(frames, "indices", np.arange(len(frames))))
        if indices.size != table.num_frames or not np.array_equal(
            indices, np.arange(table.num_frames)
        ):
            raise ValueError("awr_flow needs one item per store frame (no n-step windows)")
        self.table, self._seed = table, int(seed)
        if self.frame_advantages is None or self.frame_advantages.size != table.num_frames:
            weight = gae_weight_at(cfg) if self.has_trained_values else 0.0
            values = self.predict_frame_values(frames) if weight > 0 else None
            self.frame_advantages = compute_advantages(table, cfg, values, weight)
            self.gae_weight = weight
        self.sampler = self.build_sampler(np.asarray(train_items, dtype=np.int64))
        self._frames, self._value_items = frames, np.asarray(train_items, dtype=np.int64)
        a = self.frame_advantages
        self.stats = {
            "adv_mean": float(a.mean()),
            "adv_std": float(a.std()),
            "adv_positive": float((a > 0).mean()),
            "gae_weight": float(self.gae_weight),
            **{f"share_{k}": v for k, v in self.sampler.shares.items()},
        }

    def build_sampler(self, train_items: np.ndarray) -> AWRSampler:
        """AWRSampler over the training items grouped by source, stepped `iteration` times."""
        assert self.table is not None and self.frame_advantages is not None
        cfg = self.cfg
        sources = frame_sources(
            self.table.origin, self.table.policy_version, is_intervention=self.table.is_intervention
        )[train_items]
        present = [s for s in SOURCES if np.any(sources == SOURCES.index(s))]
        missing = [s for s in present if s not in cfg.shares]
        if missing:
            raise ValueError(
                f"algo.shares has no entry for source(s) {missing} present in the store; "
                f"it has {sorted(cfg.shares)}"
            )
        self.source_items = {s: train_items[sources == SOURCES.index(s)] for s in present}
        shares = {s: float(cfg.shares[s]) for s in present}
        total = sum(shares.values())
        if total <= 0:
            raise ValueError(f"algo.shares of the present sources {present} sum to 0")
        floors = {s: min(float(cfg.floors.get(s, 0.0)), shares[s] / total) for s in present}
        sampler = AWRSampler(
            {s: self.frame_advantages[items] for s, items in self.source_items.items()},
            cfg.beta,
            shares,
            floors,
            decay=cfg.share_decay,
            clip=cfg.clip,
        )
        for _ in range(cfg.iteration):
            sampler.step()
        sampler.sample(0, np.random.default_rng(0))  # build the draw table before threads
        return sampler

    def draw_items(self, items: np.ndarray, size: int, seed: int, step: int) -> np.ndarray:
        """The (sorted) training items of step `step`'s batch, drawn by the sampler; a
        function of (seed, step) only."""
        if self.sampler is None:
            raise RuntimeError("awr_flow: draw_items before prepare_frames")
        rng = np.random.default_rng([int(seed), int(step)])
        source, frame = self.sampler.sample(size, rng)
        out = np.empty(size, dtype=np.int64)
        for k, name in enumerate(self.sampler.names):
            pick = source == k
            out[pick] = self.source_items[name][frame[pick]]
        return np.sort(out)

    # -- RECAP ------------------------------------------------------------------------------
    def batch_advantages(self, batch: Mapping[str, torch.Tensor]) -> np.ndarray:
        """(B,) the advantage of each frame of a batch (from its episode and frame index)."""
        if self.table is None or self.frame_advantages is None:
            raise RuntimeError(
                "awr_flow: no advantages yet; prepare_frames(frames, train_items, seed) "
                "computes them (train_offline and the Runner call it)"
            )
        episode = batch["episode_index"].cpu().numpy().astype(np.int64)
        frame = batch["frame_index"].cpu().numpy().astype(np.int64)
        return self.frame_advantages[self.table.episode_start[episode] + frame]

    def recap_indicator(self, a: np.ndarray, step: int) -> np.ndarray:
        """The batch's RECAP indicator (1 / 0 / -1 null), drawn from (seed, step)."""
        cfg = self.cfg
        rng = np.random.default_rng([self._seed, int(step), 0x5EC])
        return adv.recap_indicator(
            a,
            rng,
            null_max=cfg.recap_null_max,
            null_min=cfg.recap_null_min,
            full_advantage=cfg.recap_full_advantage,
        )

    def value_batch(self, step: int) -> dict[str, torch.Tensor] | None:
        """The value heads' batch of step `step`: `value_batch_size` training frames drawn
        uniformly (a function of (seed, step)), with the null indicator; None without
        value heads, with `value_batch_size` 0, or before `prepare_frames`."""
        size = self.cfg.value_batch_size
        if self.cfg.value_weight <= 0 or size <= 0 or self._value_items.size == 0:
            return None
        rng = np.random.default_rng([self._seed, int(step), 0x7A1])
        items = np.sort(rng.choice(self._value_items, size=size))
        batch = {k: v.to(self.device) for k, v in self._frames.batch(items).items()}
        batch[ADVANTAGE_FIELD] = torch.full(
            (size,), adv.NULL, dtype=torch.int64, device=self.device
        )
        return batch

    def update(
        self, batch: dict[str, torch.Tensor], value_batch: dict[str, torch.Tensor] | None = None
    ) -> dict[str, float]:
        """bc_flow's step with the batch's RECAP indicator; the value heads learn from
        `value_batch`, by default this step's uniform `value_batch(step)`."""
        indicator = self.recap_indicator(self.batch_advantages(batch), self.step)
        batch = {**batch, ADVANTAGE_FIELD: torch.from_numpy(indicator).to(self.device)}
        if value_batch is None:
            value_batch = self.value_batch(self.step)
        out = super().update(batch, value_batch)
        out.update(self.stats)
        return out

    def value_observations(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """With the null advantage indicator, as the advantages' own value predictions."""
        rows = next(iter(batch.values())).shape[0]
        null = torch.full((rows,), adv.NULL, dtype=torch.int64)
        return self.observations({**batch, ADVANTAGE_FIELD: null}, augment=False)

    @torch.no_grad()
    def validate(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """As bc_flow, conditioned on each held-out frame's unmasked indicator."""
        a = self.batch_advantages(batch)
        indicator = np.where(a > 0, adv.POSITIVE, adv.NEGATIVE).astype(np.int64)
        return super().validate({**batch, ADVANTAGE_FIELD: torch.from_numpy(indicator)})

    # -- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.frame_advantages is not None:
            state["awr"] = {
                "advantages": torch.from_numpy(self.frame_advantages.astype(np.float64)),
                "gae_weight": float(self.gae_weight),
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        saved = state.get("awr")
        if saved is not None:  # resume with the advantages the run started from
            self.frame_advantages = saved["advantages"].cpu().numpy().astype(np.float64)
            self.gae_weight = float(saved["gae_weight"])


__all__ = [
    "ADVANTAGE_FIELD",
    "AWRFlow",
    "AWRFlowConfig",
]
