"""`flow_ppo`: RL fine-tuning of the flow-matching VLA with PPO (ReinFlow / flow-noise style).

The policy is the VLA with a noise head (`model.flow_noise`): each of the K Euler steps adds
learned Gaussian noise, so the chain x_0 -> ... -> x_K that produced a chunk has an exact
log-probability (`unilab.policies.vla.flow_noise`). Workers sample chains, execute
`model.n_act` actions of each chunk and send the chain and its per-row log-probabilities
through the ring (`chain`, `chain_logp`, and `replanned` marking the decision steps).

The learner, read top to bottom:

1. a critic (an MLP on the `critic` group: privileged state, so it stays cheap whatever the
   policy sees) gives V at every step; `decision_advantages` turns the steps into decisions
   (one per chunk) with GAE over decisions (`unilab.algos.chunk_returns`);
2. the ratio of a decision is the chain's log-probability under the current parameters
   over the behaviour policy's, counting only the action rows that were executed, divided
   by the number of random elements (K steps x n_act rows x A): a per-element (geometric
   mean) ratio, as ReinFlow normalises, so the clip range means the same for any K, H, A;
3. clipped surrogate on normalised advantages; epochs stop early when the KL estimate
   passes `target_kl`; the critic has its own optimizer and trains alone for the first
   `critic_warmup` iterations (a fresh critic's advantages would only add noise to a good
   imitation policy).

Start from imitation: `algo.init=RUN_DIR` (a `bc_flow` run, or one of its checkpoint files).
At compose time the model settings come from that run (`adopt_task`), so workers, play,
eval and export rebuild the same network; the learner loads the weights (EMA actor) once.
Deterministic evaluation integrates the same velocity field without noise.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import yaml
from torch import nn

from unilab.algos.base import Algorithm, FieldSpecs, transition_fields
from unilab.algos.chunk_returns import decision_advantages
from unilab.algos.registry import register_algo
from unilab.algos.token_schedule import SCHEDULES, TokenSchedule
from unilab.config.checks import checked
from unilab.config.errors import ConfigError
from unilab.config.schema import AlgoConfig
from unilab.policies.actor_critic import ValueCritic
from unilab.policies.vla.config import VLAConfig, inputs_from_shapes
from unilab.policies.vla.policy import VLAPolicy
from unilab.runtime.fields import ring_field
from unilab.utils.checkpoint import CheckpointError, load_checkpoint, load_latest_good


@dataclass
class FlowPPOConfig(AlgoConfig):
    name: str = "flow_ppo"
    init: str = ""
    """A `bc_flow` run directory or checkpoint file to start from ('' = a fresh network;
    RL from scratch is rarely what you want with a VLA)."""
    model_from: str = ""
    """Set at compose time to the `init` whose model settings `model` holds (so a saved
    config never reads the init run again)."""
    model: VLAConfig = field(default_factory=lambda: VLAConfig(flow_noise=True))
    """The network; taken from the init run, with `flow_noise` on."""
    n_act: int = checked(0, ge=0)
    """Actions executed per chunk before re-planning (0: the model's `n_act`)."""
    num_steps: int = checked(0, ge=0)
    """Euler steps of the chain during fine-tuning and after it (0: the init run's K).
    ReinFlow fine-tunes with K = 1-4: fewer noisy steps per decision, so each step's noise
    and ratio matter more; the velocity field is the same at any K."""
    noise_std_min: float = checked(0.08, gt=0.0)
    """Lower bound of the per-step noise std (normalized action units)."""
    noise_std_max: float = checked(0.16, gt=0.0)
    """Upper bound of the per-step noise std."""
    vocab_size: int = checked(0, ge=0)
    """Instruction vocabulary size (from the init run, or the task's vocabulary)."""
    pad_id: int = 0
    """Padding word id."""
    actor_lr: float = checked(3e-5, gt=0.0)
    """Adam learning rate of the policy (small: fine-tuning a trained flow)."""
    critic_lr: float = checked(1e-3, gt=0.0)
    """Adam learning rate of the critic."""
    critic_hidden: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden widths of the critic MLP."""
    activation: str = "elu"
    """Critic hidden activation."""
    gamma: float = checked(0.99, gt=0.0, le=1.0)
    """Per-step discount (a decision of m steps discounts by gamma^m)."""
    lam: float = checked(0.95, ge=0.0, le=1.0)
    """GAE lambda over decisions."""
    clip: float = checked(0.05, gt=0.0)
    """Clip range of the per-element ratio."""
    num_epochs: int = checked(4, ge=1)
    """Passes over each batch of decisions."""
    num_minibatches: int = checked(4, ge=1)
    """Minibatches per pass."""
    target_kl: float = checked(0.01, ge=0.0)
    """Stop the epochs once the per-element KL estimate passes this (0: never)."""
    max_grad_norm: float = checked(1.0, gt=0.0)
    """Gradient norm clip (policy and critic separately)."""
    critic_warmup: int = checked(2, ge=0)
    """Iterations that train only the critic."""
    freeze_actor: bool = False
    """Never update the flow policy: only the critic, the token schedule and the selector
    learn. With tokens this is RL over which behaviour mode to run, which keeps the modes the
    imitation policy learned intact (actor updates on a small success signal wore the best
    token's lead away on arm_around_obstacle; ADR 0111). Without tokens nothing that acts
    learns, so the run measures the imitation policy."""
    reward: str = checked("success", choices=("success", "task"))
    """What the learner maximises: `success`, 1 at the last step of a successful episode
    and 0 elsewhere (the task's `success` metric; what a VLA is fine-tuned for: shaped
    rewards can rise while success falls), or `task`, the task's own shaped reward."""
    reward_scale: float = checked(1.0, gt=0.0)
    """Rewards are multiplied by this before the advantages."""
    use_tokens: bool = True
    """Explore under exploration tokens when the init run has them (`model.n_tokens` > 0);
    false: every rollout runs the null token (the same checkpoint without tokens, the
    comparison the ExToken recipe is judged by)."""
    token_schedule: str = checked("uniform", choices=SCHEDULES)
    """With exploration tokens (the init run's `model.n_tokens` > 0): how rollout episodes
    pick theirs (`unilab.algos.token_schedule`): uniform, count, bandit."""
    token_floor: float = checked(0.2, ge=0.0, le=1.0)
    """Share of the token draws spread uniformly whatever the schedule."""
    token_decay: float = checked(0.95, gt=0.0, le=1.0)
    """Per-iteration decay of the token statistics."""
    selector_lr: float = checked(1e-3, gt=0.0)
    """Adam learning rate of the token selector."""
    selector_beta: float = checked(1.0, gt=0.0)
    """Temperature of the selector's advantage weights exp(clip(A, -2, 2) / beta)."""
    selector_epochs: int = checked(4, ge=1)
    """Passes of the selector over each batch's decisions (in `num_minibatches`
    minibatches). One step per batch left a fresh selector near its random start for
    tens of iterations, and evaluation runs the selector's choice."""

    def adopt_task(self, vocabulary: tuple[str, ...]) -> list[str]:
        """Called by `compose`: model settings from the init run, vocabulary from the task."""
        problems: list[str] = []
        if self.init and self.model_from != self.init:
            try:
                doc = init_algo_config(Path(self.init))
            except (CheckpointError, FileNotFoundError, ValueError) as exc:
                return [f"init: {exc}"]
            if doc.get("name") not in ("bc_flow", "flow_ppo"):
                return [f"init: {self.init} is a {doc.get('name')!r} run; need bc_flow or flow_ppo"]
            model = dict(doc.get("model") or {})
            known = {f for f in VLAConfig.__dataclass_fields__}
            self.model = VLAConfig(**{k: v for k, v in model.items() if k in known})
            self.vocab_size = int(doc.get("vocab_size", self.vocab_size))
            self.pad_id = int(doc.get("pad_id", self.pad_id))
            self.model_from = self.init
        if vocabulary and self.vocab_size == 0:
            self.vocab_size = len(vocabulary)
        self.model.flow_noise = True
        tokens = self.use_tokens and self.model.n_tokens > 0
        self.model.rollout_tokens = self.model.token_selector = tokens
        self.model.noise_std_min, self.model.noise_std_max = self.noise_std_min, self.noise_std_max
        if self.n_act:
            self.model.n_act = self.n_act
        if self.num_steps:
            self.model.num_steps = self.num_steps
        return problems

    def problems(self) -> list[str]:
        out = []
        try:
            self.model.validate()
        except ValueError as exc:
            out.append(f"model: {exc}")
        if self.noise_std_min > self.noise_std_max:
            out.append(f"noise_std_min={self.noise_std_min} exceeds noise_std_max")
        if self.n_act > self.model.horizon:
            out.append(f"n_act={self.n_act} exceeds the chunk horizon {self.model.horizon}")
        return out


def checkpoint_file(init: Path) -> tuple[Path, dict[str, Any]]:
    """A checkpoint file as it is; a run directory: its newest readable checkpoint."""
    if init.is_dir():
        path, state, _ = load_latest_good(
            init / "checkpoints" if (init / "checkpoints").is_dir() else init
        )
        return path, state
    if not init.exists():
        raise FileNotFoundError(f"{init} does not exist (a bc_flow run directory or checkpoint)")
    return init, load_checkpoint(init)


def init_algo_config(init: Path) -> dict[str, Any]:
    """The `algo` section of the init checkpoint's saved config."""
    _, state = checkpoint_file(init)
    doc = yaml.safe_load(str(state.get("config", ""))) or {}
    algo = doc.get("algo") if isinstance(doc, dict) else None
    if not isinstance(algo, dict):
        raise ValueError(f"{init}: the checkpoint holds no algo config")
    return algo


@register_algo("flow_ppo", FlowPPOConfig)
class FlowPPO(Algorithm):
    """PPO fine-tuning of the flow-matching VLA through noisy K-step chains (on-policy)."""

    shaped_obs: ClassVar[bool] = True

    def __init__(
        self,
        cfg: FlowPPOConfig,
        obs_dims: dict[str, Any],
        action_dim: int,
        device: torch.device,
    ) -> None:
        widths = _widths(obs_dims)
        super().__init__(cfg, widths, action_dim, device)
        self.cfg: FlowPPOConfig = cfg
        self.actor: VLAPolicy = self.build_actor(cfg, obs_dims, action_dim).to(device).train()
        if cfg.init:
            self._load_init(Path(cfg.init))
        self.critic = ValueCritic(widths[self.critic_group], cfg.critic_hidden, cfg.activation)
        self.critic = self.critic.to(device)
        selector = self.actor.selector
        chosen = {id(p) for p in selector.parameters()} if selector is not None else set()
        policy_params = [p for p in self.actor.parameters() if id(p) not in chosen]
        self.actor_optimizer = torch.optim.Adam(policy_params, lr=cfg.actor_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.selector_optimizer = (
            torch.optim.Adam(selector.parameters(), lr=cfg.selector_lr) if selector else None
        )
        self.tokens = int(self.actor.cfg.n_tokens) if self.actor.cfg.rollout_tokens else 0
        self.schedule = TokenSchedule(
            max(1, self.tokens), cfg.token_schedule, decay=cfg.token_decay, floor=cfg.token_floor
        )
        self.iterations = 0

    @staticmethod
    def build_actor(cfg: Any, obs_dims: dict[str, Any], action_dim: int) -> VLAPolicy:
        inputs = inputs_from_shapes(obs_dims, action_dim, cfg.vocab_size, cfg.pad_id)
        model = copy.deepcopy(cfg.model)
        model.flow_noise = True
        return VLAPolicy(inputs, model, "flow")

    @classmethod
    def rollout_n_act(cls, cfg: Any) -> int | None:
        return int(cfg.model.n_act)

    @classmethod
    def rollout_fields(cls, cfg: Any, shapes: Any) -> FieldSpecs:
        """Vector groups and the critic's next observation as for PPO, plus the camera
        images (uint8; the VLA reads no depth), the instruction ids (if the policy reads
        them), the chain, its per-row log-probabilities and the decision flag."""
        model = cfg.model
        extra: FieldSpecs = {}
        for group, shape in shapes.obs_shapes.items():
            if group.startswith("images/"):  # the learner re-runs the policy on them
                extra[ring_field(group)] = (tuple(shape), "uint8")
        if cfg.vocab_size and "instruction" in shapes.obs_shapes:
            extra[ring_field("instruction")] = (tuple(shapes.obs_shapes["instruction"]), "int64")
        groups = ("critic",) if "critic" in shapes.obs_dims else ("policy",)
        fields = transition_fields(shapes.obs_dims, shapes.action_dim, groups, True, extra)
        h, a = int(model.horizon), int(shapes.action_dim)
        fields["chain"] = ((int(model.num_steps) + 1, h, a), "float32")
        fields["chain_logp"] = ((h,), "float32")
        fields["replanned"] = ((), "float32")
        if cfg.reward == "success" and "success" not in shapes.task_metrics:
            raise ConfigError(
                "algo.reward=success needs a task with a `success` metric; this task reports "
                f"{shapes.task_metrics}: set algo.reward=task"
            )
        fields["episode_success"] = ((), "float32")
        if model.n_tokens and model.rollout_tokens:
            fields["token"] = ((), "int64")
        return fields

    def _load_init(self, init: Path) -> None:
        path, state = checkpoint_file(init)
        weights = state["algo"]["actor"]
        missing, unexpected = self.actor.load_state_dict(weights, strict=False)
        added = ("noise_head.", "token_sampler.", "selector.")  # what RL adds to the BC net
        fresh = [k for k in missing if not k.startswith(added)]
        if fresh or unexpected:
            raise ValueError(
                f"{path}: the init weights do not fit this policy (missing {fresh[:5]}, "
                f"unexpected {list(unexpected)[:5]}): the init run's model settings must match"
            )

    # -- one iteration --------------------------------------------------------------------
    def _obs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        obs = {}
        for group in self.actor.inputs.obs_keys:  # images travel as `images_<camera>`
            obs[group] = batch[ring_field(group)]
        if self.tokens:
            obs["token"] = batch["token"]
        return obs

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.cfg
        group = self.critic_group
        self.critic.normalizer.update(batch[f"obs_{group}"])
        with torch.no_grad():
            values = self.critic(batch[f"obs_{group}"])
            next_values = self.critic(batch[f"next_obs_{group}"])
        if cfg.reward == "success":  # 1 where a successful episode ended, else 0
            reward = torch.nan_to_num(batch["episode_success"], nan=0.0)
        else:
            reward = batch["reward"]
        adv, returns, steps = decision_advantages(
            reward * cfg.reward_scale,
            batch["terminated"],
            batch["truncated"],
            batch["replanned"],
            values,
            next_values,
            cfg.gamma,
            cfg.lam,
        )
        decide = batch["replanned"] > 0.5
        rows = {k: v[decide] for k, v in self._obs(batch).items()}
        chains = batch["chain"][decide]
        old_logp = batch["chain_logp"][decide]
        critic_obs = batch[f"obs_{group}"][decide]
        adv, returns = adv[decide], returns[decide]
        n = int(adv.shape[0])
        stats = {"decisions": float(n), "decision_steps": float(steps[decide].mean()) if n else 0.0}
        if n < 2:
            return stats
        adv_n = (adv - adv.mean()) / (adv.std() + 1e-8)
        n_act = int(cfg.model.n_act)
        elements = float(cfg.model.num_steps * n_act * self.action_dim)
        old = old_logp[:, :n_act].sum(-1)
        train_actor = not cfg.freeze_actor and self.iterations >= cfg.critic_warmup
        mb = max(2, n // cfg.num_minibatches)
        sums = {"policy_loss": 0.0, "value_loss": 0.0, "kl": 0.0, "clip_frac": 0.0}
        count, stopped = 0, False
        for _ in range(cfg.num_epochs):
            perm = torch.randperm(n, device=adv.device)
            for start in range(0, n - mb + 1, mb):
                idx = perm[start : start + mb]
                value = self.critic(critic_obs[idx])
                value_loss = (value - returns[idx]).square().mean()
                self.critic_optimizer.zero_grad(set_to_none=True)
                value_loss.backward()
                nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                self.critic_optimizer.step()
                sums["value_loss"] += float(value_loss.detach())
                count += 1
                if not train_actor or stopped:
                    continue
                obs = {k: v[idx] for k, v in rows.items()}
                new = self.actor.chain_log_prob(obs, chains[idx])[:, :n_act].sum(-1)
                log_ratio = (new - old[idx]) / elements
                ratio = log_ratio.exp()
                a = adv_n[idx]
                surrogate = torch.max(-a * ratio, -a * ratio.clamp(1 - cfg.clip, 1 + cfg.clip))
                policy_loss = surrogate.mean()
                self.actor_optimizer.zero_grad(set_to_none=True)
                policy_loss.backward()
                nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.max_grad_norm)
                self.actor_optimizer.step()
                with torch.no_grad():
                    lr_ = log_ratio.detach()
                    kl = float((lr_.exp() - 1 - lr_).mean())
                    sums["policy_loss"] += float(policy_loss.detach())
                    sums["kl"] += kl
                    sums["clip_frac"] += float(((ratio - 1).abs() > cfg.clip).float().mean())
                if cfg.target_kl and kl > cfg.target_kl:
                    stopped = True
        self.iterations += 1
        out = {k: v / max(count, 1) for k, v in sums.items()}
        out.update(stats)
        if self.tokens:
            out.update(self._tokens_step(batch, rows, adv_n))
        out["kl_stopped"] = float(stopped)
        out["actor_trained"] = float(train_actor)
        out["value_mean"] = float(values.mean())
        out["advantage_std"] = float(adv.std())
        return out

    def _tokens_step(
        self, batch: dict[str, torch.Tensor], rows: dict[str, torch.Tensor], adv_n: torch.Tensor
    ) -> dict[str, float]:
        """Exploration tokens: the schedule learns from the finished episodes (their token
        and success) and sets the next draw probabilities; the selector takes one
        advantage-weighted cross-entropy step on the tokens the decisions ran under."""
        out: dict[str, float] = {}
        success = batch["episode_success"]
        ended = ~torch.isnan(success)
        tokens = batch["token"][ended].cpu().numpy()
        self.schedule.update(tokens, success[ended].cpu().numpy())
        probs = self.schedule.probs()
        sampler = self.actor.token_sampler
        if sampler is not None:
            sampler.probs.copy_(torch.as_tensor(probs, dtype=sampler.probs.dtype))
        for k, (p, m) in enumerate(zip(probs, self.schedule.mean_success(), strict=True)):
            out[f"token_prob_{k}"] = float(p)
            out[f"token_success_{k}"] = float(m)
        selector = self.actor.selector
        if self.selector_optimizer is not None and selector is not None and adv_n.numel():
            cfg = self.cfg
            weights = torch.exp(adv_n.clamp(-2.0, 2.0) / cfg.selector_beta)
            features = self.actor.selector_features({k: v for k, v in rows.items() if k != "token"})
            chosen = rows["token"].long()
            n = chosen.shape[0]
            mb = max(2, n // cfg.num_minibatches)
            losses = []
            for _ in range(cfg.selector_epochs):
                perm = torch.randperm(n, device=chosen.device)
                for start in range(0, n, mb):
                    idx = perm[start : start + mb]
                    ce = nn.functional.cross_entropy(
                        selector.net(features[idx]), chosen[idx], reduction="none"
                    )
                    loss = (weights[idx] * ce).sum() / weights[idx].sum()
                    self.selector_optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    self.selector_optimizer.step()
                    losses.append(float(loss.detach()))
            out["selector_loss"] = sum(losses) / len(losses)
        return out

    # -- checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "iterations": self.iterations,
            "token_schedule": self.schedule.state_dict(),
        }
        if self.selector_optimizer is not None:
            state["selector_optimizer"] = self.selector_optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.iterations = int(state["iterations"])
        self.schedule.load_state_dict(state["token_schedule"])
        if self.selector_optimizer is not None:
            self.selector_optimizer.load_state_dict(state["selector_optimizer"])


def _widths(obs_dims: dict[str, Any]) -> dict[str, int]:
    """The float vector groups' widths from every group's shape."""
    out = {}
    for key, value in obs_dims.items():
        shape = getattr(value, "shape", value)
        if isinstance(shape, int):
            out[key] = shape
        elif len(shape) == 1 and not key.startswith(("images/", "depth/")) and key != "instruction":
            out[key] = int(shape[0])
    return out
