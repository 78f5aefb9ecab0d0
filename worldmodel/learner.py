"""`algo=world_model`: trains `WorldModel` from an episode store on the Runner's offline loop.

Every origin trains it (sim, real, human, earlier `wm` rollouts), failures included: an
episode store is cut by `FrameDataset(action_horizon=H, n_step=H, gamma=1)` into
transitions frame t + action chunk t..t+H-1 -> frame t+H (or the episode's last frame,
when it ends sooner), the chunk's summed reward and whether the episode ended. One step of
the loss:

    reconstruction  |decode(encode(x_t)) - x_t|^2                   (pixels in [0, 1])
    prediction      |decode(z^_t+H) - x_t+H|^2                      (the frame H ahead)
    latent          |z^_t+H - sg(encode(x_t+H))|^2                  * latent_weight
    proprioception  |p^_t+H - p_t+H|^2 (normalized)                 * proprio_weight
    reward          squared error of the chunk's summed reward      * reward_weight
    done, success   cross-entropy of "terminates in the chunk" and
                    "... and the episode succeeded" (metadata)     * done_weight

Held-out validation reports the prediction's frame and proprioception errors next to the
copy-last-frame baseline's on the same transitions (`val_frame_mse` vs
`val_copy_frame_mse`): the number to beat. The run directory, checkpoints (with the
normalizer statistics), bit-exact resume, TensorBoard and the progress bar are the Runner's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from unilab.algos.base import Algorithm
from unilab.algos.flow_ppo import checkpoint_file
from unilab.algos.registry import register_algo
from unilab.config.errors import ConfigError
from unilab.runtime.torch_policy import PolicyModule
from unilab.utils.checkpoint import CheckpointError
from unilab.worldmodel.config import WorldModelConfig
from unilab.worldmodel.model import WorldModel, to_unit


def model_from_shapes(
    cfg: WorldModelConfig, obs_shapes: Mapping[str, Any], action_dim: int
) -> WorldModel:
    """The world model for a task's observation shapes (`images/<cam>` (S, S, 3), `policy`)."""

    def dims(v: Any) -> tuple[int, ...]:
        v = getattr(v, "shape", v)
        return (int(v),) if isinstance(v, int) else tuple(int(s) for s in v)

    cams = sorted(k.removeprefix("images/") for k in obs_shapes if k.startswith("images/"))
    if not cams:
        raise ConfigError(
            "algo=world_model needs camera images: pick a task with cameras (the tabletop "
            "arm tasks, task.cameras=[front,...]); this task observes "
            f"{sorted(obs_shapes)}"
        )
    sides = {dims(obs_shapes[f"images/{c}"])[:2] for c in cams}
    if len(sides) != 1 or len(next(iter(sides))) != 2 or len(set(next(iter(sides)))) != 1:
        raise ConfigError(f"algo=world_model wants square images of one size; got {sides}")
    size = next(iter(sides))[0]
    proprio = dims(obs_shapes["policy"])[0] if "policy" in obs_shapes else 0
    try:
        return WorldModel(
            cams,
            size,
            proprio,
            action_dim,
            cfg.horizon,
            latent=cfg.latent_dim,
            channels=list(cfg.channels),
            width=cfg.dynamics_width,
            layers=cfg.dynamics_layers,
        )
    except ValueError as exc:
        raise ConfigError(f"algo=world_model: {exc}") from None


@register_algo("world_model", WorldModelConfig)
class WorldModelLearner(Algorithm):
    """Action-conditioned world model over camera latents (offline, from an episode store)."""

    offline: ClassVar[bool] = True
    off_policy: ClassVar[bool] = True
    shaped_obs: ClassVar[bool] = True
    learns_policy: ClassVar[bool] = False
    uses_logprob: ClassVar[bool] = False

    def __init__(
        self,
        cfg: WorldModelConfig,
        obs_dims: Mapping[str, Any],
        action_dim: int,
        device: torch.device,
    ) -> None:
        widths = {k: v for k, v in obs_dims.items() if isinstance(v, int)}
        super().__init__(cfg, widths, action_dim, device)
        self.cfg: WorldModelConfig = cfg
        self.model = model_from_shapes(cfg, obs_dims, action_dim).to(device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            fused=True,  # one kernel for all parameters: small nets are op-bound
        )
        self.step = 0
        self.generator = torch.Generator()  # nothing random in the loss; kept for the protocol
        if cfg.init:
            self._load_init(Path(cfg.init))

    def _load_init(self, init: Path) -> None:
        """Weights and normalizers of another world-model run (fine-tuning starts there)."""
        try:
            path, state = checkpoint_file(init)
        except (FileNotFoundError, CheckpointError) as exc:
            raise ConfigError(
                f"algo.init={init}: no usable world-model checkpoint ({exc})"
            ) from None
        algo = state.get("algo") or {}
        if "model" not in algo:
            raise ConfigError(f"algo.init={init}: {path} holds no world model (algo=world_model)")
        try:
            self.model.load_state_dict(algo["model"])
        except RuntimeError as exc:
            raise ConfigError(
                f"algo.init={init}: its weights do not fit this model (train with the init "
                f"run's channels, latent_dim, dynamics_width/layers, horizon): {exc}"
            ) from None

    @staticmethod
    def build_actor(cfg: Any, obs_dims: dict[str, int], action_dim: int) -> PolicyModule:
        raise ConfigError(
            "algo=world_model learns a world model, not a policy: there is no actor to run, "
            "export or play (use `unilab wm eval` / `unilab wm generate`)"
        )

    @classmethod
    def frame_options(cls, cfg: WorldModelConfig) -> dict[str, Any]:
        """Transitions of one chunk: actions t..t+H-1 and the frame H ahead."""
        return {"action_horizon": cfg.horizon, "n_step": cfg.horizon, "gamma": 1.0}

    def seed(self, seed: int) -> None:
        self.generator.manual_seed(int(seed))

    # -- batches --------------------------------------------------------------------------
    def required_fields(self) -> dict[str, tuple[int, ...]]:
        m = self.model
        shapes: dict[str, tuple[int, ...]] = {f"images/{c}": (m.size, m.size, 3) for c in m.cameras}
        shapes |= {f"next/images/{c}": (m.size, m.size, 3) for c in m.cameras}
        if m.proprio_dim:
            shapes[self.cfg.proprio_field] = (m.proprio_dim,)
            shapes[f"next/{self.cfg.proprio_field}"] = (m.proprio_dim,)
        shapes["action"] = (self.cfg.horizon, self.action_dim)
        shapes["nstep_reward"] = ()
        shapes["nstep_done"] = ()
        shapes["nstep_success"] = ()
        return shapes

    def _proprio(self, batch: Mapping[str, torch.Tensor], key: str) -> torch.Tensor:
        m = self.model
        if not m.proprio_dim:
            return torch.zeros(batch["action"].shape[0], 0, device=self.device)
        return m.proprio_norm(batch[key].to(self.device))

    def _losses(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per-transition (B,) errors of every loss term, and the copy-last baselines."""
        m, cfg, dev = self.model, self.cfg, self.device
        frames = {c: batch[f"images/{c}"].to(dev) for c in m.cameras}
        nxt = {c: batch[f"next/images/{c}"].to(dev) for c in m.cameras}
        x_t = torch.stack([to_unit(frames[c]) for c in m.cameras], 1)
        x_n = torch.stack([to_unit(nxt[c]) for c in m.cameras], 1)
        z_t = m.encode(frames)
        with torch.no_grad():
            z_target = m.encode(nxt)
        p_t = self._proprio(batch, cfg.proprio_field)
        p_n = self._proprio(batch, f"next/{cfg.proprio_field}")
        actions = batch["action"].to(dev, torch.float32)
        pad = batch["action_is_pad"].to(dev)
        z_hat, p_hat, reward, done, success = m.predict(z_t, p_t, actions, pad)

        def per_item(x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1).mean(1) if x.dim() > 1 and x.shape[1] else x.new_zeros(x.shape[0])

        return {
            "recon": per_item((m.decode(z_t) - x_t).square()),
            "frame": per_item((m.decode(z_hat) - x_n).square()),
            "latent": per_item((z_hat - z_target).square()),
            "proprio": per_item((p_hat - p_n).square()),
            "reward": (reward - batch["nstep_reward"].to(dev)).square(),
            "done": F.binary_cross_entropy_with_logits(
                done, batch["nstep_done"].to(dev, torch.float32), reduction="none"
            ),
            "success": F.binary_cross_entropy_with_logits(
                success, batch["nstep_success"].to(dev, torch.float32), reduction="none"
            ),
            "copy_frame": per_item((x_t - x_n).square()),
            "copy_latent": per_item((z_t.detach() - z_target).square()),
            "copy_proprio": per_item((p_t - p_n).square()),
        }

    def _total(self, terms: Mapping[str, torch.Tensor]) -> torch.Tensor:
        cfg = self.cfg
        return (
            terms["recon"]
            + terms["frame"]
            + cfg.latent_weight * terms["latent"]
            + cfg.proprio_weight * terms["proprio"]
            + cfg.reward_weight * terms["reward"]
            + cfg.done_weight * (terms["done"] + terms["success"])
        )

    # -- learning -------------------------------------------------------------------------
    @torch.no_grad()
    def fit_normalizers(self, batch: Mapping[str, torch.Tensor]) -> None:
        """Fit on the training frames; from an init run, keep its statistics (its weights
        were trained on them)."""
        if self.cfg.init:
            return
        m = self.model
        keep = ~batch["action_is_pad"].to(self.device)
        m.action_norm.fit(batch["action"].to(self.device)[keep])
        if m.proprio_dim:
            m.proprio_norm.fit(batch[self.cfg.proprio_field].to(self.device))

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.cfg
        self.model.train()
        terms = self._losses(batch)
        loss = self._total(terms).mean()
        lr = cfg.lr * min(1.0, (self.step + 1) / max(1, cfg.warmup_steps))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.zeros(())
        if cfg.max_grad_norm > 0:
            grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        self.step += 1
        out = {k: float(v.detach().mean()) for k, v in terms.items() if not k.startswith("copy_")}
        out.update(loss=float(loss.detach()), lr=lr, grad_norm=float(grad_norm))
        return out

    @torch.no_grad()
    def validate(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.model.eval()
        terms = self._losses(batch)
        sums = {f"{k}_sum": v.sum() for k, v in terms.items()}
        sums["loss_sum"] = self._total(terms).sum()
        sums["frames"] = torch.tensor(float(batch["action"].shape[0]))
        return sums

    def validation_metrics(self, sums: Mapping[str, float]) -> dict[str, float]:
        n = max(sums["frames"], 1.0)
        out = {"val_loss": sums["loss_sum"] / n}
        for key in ("frame", "latent", "proprio"):
            out[f"val_{key}_mse"] = sums[f"{key}_sum"] / n
            out[f"val_copy_{key}_mse"] = sums[f"copy_{key}_sum"] / n
        for key in ("reward",):
            out[f"val_{key}_mse"] = sums[f"{key}_sum"] / n
        out["val_frames"] = sums["frames"]
        return out

    # -- checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.generator.set_state(state["generator"])
