"""`VLAPolicy`: the one adapter class the runtime, the learners and export talk to.

Observations are a dict of named groups (torch tensors, batch first):
`policy` float32 (N, d) proprioception, `images/<cam>` uint8 (N, H, W, 3), `instruction`
int64 (N, L) word ids, and optionally `token` (N,) behaviour token and `advantage` (N,)
indicator (-1 or absent: null). `sample` returns an action chunk (N, H, A) in the task's
action units plus a per-chunk log-probability (or None where the sampler has none).

Heads: `flow` (flow matching, the VLA) or `mse` (the regression baseline). The flow head
encodes the prefix once per chunk and reruns only the action expert per Euler step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from unilab.policies.vla.action_expert import ActionExpert, ExpertContext
from unilab.policies.vla.chunking import ChunkExecutor, Planner
from unilab.policies.vla.config import VLAConfig, VLAInputs
from unilab.policies.vla.flow import euler_integrate, guided, time_grid
from unilab.policies.vla.flow_noise import Chain, NoiseHead
from unilab.policies.vla.mse_head import GaussianChunkHead
from unilab.policies.vla.noisy_chain import noisy_chain_log_prob, sample_noisy_chain
from unilab.policies.vla.normalize import ActionNormalizer
from unilab.policies.vla.planner import check_best_of_n, make_planner
from unilab.policies.vla.prefix import Prefix, PrefixEncoder
from unilab.policies.vla.state_head import StateHead
from unilab.policies.vla.tokens import SELECT_TOKEN, TokenSampler, TokenSelector
from unilab.policies.vla.training_loss import (
    fit_policy_normalizers,
    policy_loss,
    predict_policy_values,
)
from unilab.policies.vla.value_heads import ValueHeads, ValueTargets
from unilab.runtime.policy import ActionChunk
from unilab.runtime.torch_policy import PolicyModule

HEADS = ("flow", "mse")
Obs = Mapping[str, torch.Tensor]


class VLAPolicy(PolicyModule):
    """`Policy[torch.Tensor]` (`unilab.runtime.policy`) with action chunks of H = `horizon`:
    `act`/`act_inference` are the protocol; `sample` adds explicit noise and a generator."""

    def __init__(
        self, inputs: VLAInputs, cfg: VLAConfig, head: str = "flow", state_dim: int = 0
    ) -> None:
        """`state_dim` > 0 adds a `StateHead` predicting a training-time target of that
        width (the privileged object state) from the prefix: an auxiliary loss only."""
        super().__init__()
        inputs.validate()
        cfg.validate()
        if head not in HEADS:
            raise ValueError(f"unknown VLA head {head!r}; valid: {', '.join(HEADS)}")
        self.inputs = inputs
        self.cfg = cfg
        self.head = head
        self.action_dim = inputs.action_dim
        self.horizon = cfg.horizon
        self.num_steps = cfg.num_steps
        self.prefix = PrefixEncoder(inputs, cfg)
        self.action_norm = ActionNormalizer(inputs.action_dim)
        self.expert: ActionExpert | None = None
        self.noise_head: NoiseHead | None = None
        self.gaussian: GaussianChunkHead | None = None
        if head == "flow":
            self.expert = ActionExpert(inputs.action_dim, cfg, timed=True)
            if cfg.flow_noise:
                self.noise_head = NoiseHead(
                    cfg.width, inputs.action_dim, cfg.noise_std_min, cfg.noise_std_max
                )
        else:
            self.gaussian = GaussianChunkHead(inputs.action_dim, cfg)
        self.state_head = StateHead(cfg.width, state_dim) if state_dim else None
        self.value_heads = ValueHeads(cfg.width) if cfg.value_heads else None
        tokens = cfg.n_tokens
        self.token_sampler = TokenSampler(tokens) if tokens and cfg.rollout_tokens else None
        self.selector = TokenSelector(cfg.width, tokens) if tokens and cfg.token_selector else None

    @property
    def device(self) -> torch.device:
        return self.action_norm.mean.device

    @property
    def action_horizon(self) -> int:  # type: ignore[override]  # a property over cfg
        return int(self.horizon)

    @property
    def obs_groups(self) -> tuple[str, ...]:
        groups = ["policy"] if self.inputs.proprio_dim else []
        groups += [f"images/{cam}" for cam in self.inputs.cameras]
        if self.inputs.vocab_size:
            groups.append("instruction")
        return (*groups, *self.condition_names)

    @property
    def obs_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-env shape of each observation group the policy reads (conditions aside)."""
        spec = self.inputs
        shapes: dict[str, tuple[int, ...]] = {}
        if spec.proprio_dim:
            shapes["policy"] = (spec.proprio_dim,)
        for cam, (h, w) in spec.cameras.items():
            shapes[f"images/{cam}"] = (h, w, 3)
        if spec.vocab_size:
            shapes["instruction"] = (spec.instruction_len,)
        return shapes

    def act(self, obs: Obs, deterministic: bool = False) -> ActionChunk[torch.Tensor]:
        """The protocol's rollout path: `sample` with fresh noise (zeros when deterministic).
        With `flow_noise` and not deterministic, the chain is sampled with its exact
        log-probability and returned in the extras (`chain` (N, K + 1, H, A) normalized
        units, `chain_logp` (N, H) per action row): what a flow-PPO learner recomputes."""
        present = {k: v for k, v in obs.items() if k in self.obs_groups}
        token_extra: dict[str, torch.Tensor] = {}
        if self.token_sampler is not None and not deterministic and "token" not in present:
            n = next(iter(present.values())).shape[0]
            tokens = torch.from_numpy(self.token_sampler.tokens(n)).to(self.device)
            present["token"] = token_extra["token"] = tokens
        if self.noise_head is not None and not deterministic:
            with torch.inference_mode():
                n = self.check_obs(present)
                tensors = self._to_device(present)
                chain = self.sample_chain(tensors, self.draw_noise(n))
            actions = self.action_norm.unnormalize(chain.actions)
            extras = {"chain": chain.states, "chain_logp": chain.log_prob, **token_extra}
            return ActionChunk(actions, chain.log_prob.sum(-1), extras)
        actions, logprob = self.sample(present, deterministic)
        return ActionChunk(actions, logprob, token_extra)

    def act_inference(self, obs: Obs) -> torch.Tensor:
        """Deterministic chunk: the ODE from zero noise (the MSE head: its mean)."""
        return self.sample(obs, deterministic=True)[0]

    @property
    def condition_names(self) -> list[str]:
        return list(self.prefix.conditions)

    # -- inputs ---------------------------------------------------------------------------
    def check_obs(self, obs: Obs) -> int:
        """Raise a ValueError naming the problem unless `obs` fits this policy; -> batch size."""
        spec = self.inputs
        missing = [k for k in spec.obs_keys if k not in obs]
        if missing:
            raise ValueError(
                f"observation is missing {missing}; this policy reads {spec.obs_keys} "
                f"(+ optional {self.condition_names})"
            )
        n = int(obs[spec.obs_keys[0]].shape[0])
        expect: dict[str, tuple[tuple[int, ...], tuple[torch.dtype, ...]]] = {}
        if spec.proprio_dim:
            expect["policy"] = ((n, spec.proprio_dim), (torch.float32, torch.float64))
        for cam, (h, w) in spec.cameras.items():
            expect[f"images/{cam}"] = ((n, h, w, 3), (torch.uint8, torch.float32))
        if spec.vocab_size:
            expect["instruction"] = ((n, spec.instruction_len), (torch.int64, torch.int32))
        for key, (shape, dtypes) in expect.items():
            x = obs[key]
            if tuple(x.shape) != shape or x.dtype not in dtypes:
                raise ValueError(
                    f"observation {key!r} has shape {tuple(x.shape)} {x.dtype}; expected "
                    f"{shape} {' or '.join(str(d) for d in dtypes)}"
                )
        if spec.vocab_size:
            ids = obs["instruction"]
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= spec.vocab_size):
                raise ValueError(
                    f"instruction ids must be in [0, {spec.vocab_size}); got "
                    f"[{int(ids.min())}, {int(ids.max())}]"
                )
        for name, cond in self.prefix.conditions.items():
            if name in obs:
                v = obs[name].reshape(-1)
                if v.shape[0] != n or (v.numel() and int(v.max()) >= cond.num_values):
                    raise ValueError(
                        f"{name!r} must be ({n},) ints in [-1, {cond.num_values - 1}] (-1: null)"
                    )
        return n

    def _to_device(self, obs: Obs) -> dict[str, torch.Tensor]:
        dev = self.device
        return {k: v.to(dev, non_blocking=True) for k, v in obs.items()}

    def condition_rows(
        self,
        obs: Obs,
        n: int,
        drop: bool = False,
        nulls: Sequence[str] = (),
        generator: torch.Generator | None = None,
    ) -> dict[str, torch.Tensor]:
        """Embedding rows of each enabled condition; listed in `nulls`: null; absent: null,
        except an absent `advantage` with `cfg.inference_advantage` set (RECAP: play, eval
        and deploy act as the positive-advantage policy)."""
        rows = {}
        default = self.cfg.inference_advantage
        for name, cond in self.prefix.conditions.items():
            if (
                name == "advantage"
                and name not in obs
                and name not in nulls
                and default is not None
            ):
                fill = torch.full((n,), int(default), dtype=torch.int64, device=self.device)
                rows[name] = cond.index(fill, drop, generator)
            elif name in nulls or name not in obs:
                rows[name] = torch.full((n,), cond.null, dtype=torch.int64, device=self.device)
            else:
                rows[name] = cond.index(obs[name], drop, generator)
        if self.selector is not None and "token" in rows and "token" not in nulls:
            given = obs.get("token")
            if given is None:  # nobody chose: the selector does
                rows["token"] = self.select_tokens(obs)
            else:  # SELECT_TOKEN rows ask the selector (traceable: export keeps the input)
                pick = given.reshape(-1).to(torch.int64) == SELECT_TOKEN
                rows["token"] = torch.where(pick, self.select_tokens(obs), rows["token"])
        return rows

    def token_logits(self, obs: Obs) -> torch.Tensor:
        """(N, K) selector logits from the prefix with a null token (detached input)."""
        selector = self._selector()
        n = next(iter(obs.values())).shape[0]
        rows = self.condition_rows(obs, n, nulls=["token"])
        return selector(self.prefix(dict(obs), rows))

    def selector_features(self, obs: Obs) -> torch.Tensor:
        """(N, width) the selector's input for these observations (no gradient): a learner
        computes it once per batch and trains the selector's head on it for many steps."""
        self._selector()
        n = next(iter(obs.values())).shape[0]
        with torch.no_grad():
            rows = self.condition_rows(obs, n, nulls=["token"])
            return TokenSelector.features(self.prefix(dict(obs), rows))

    def _selector(self) -> TokenSelector:
        if self.selector is None:
            raise ValueError("this VLA has no token selector (model.token_selector=false)")
        return self.selector

    def select_tokens(self, obs: Obs) -> torch.Tensor:
        """(N,) the selector's token for each observation (argmax)."""
        return self.token_logits(obs).argmax(-1)

    def choose_tokens(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """(n,) int64 the selector's tokens for numpy observations: the per-episode choice
        a `ChunkExecutor` holds (`cfg.selector_holds_token`)."""
        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in obs.items()}
        self.check_obs(tensors)
        with torch.inference_mode():
            return self.select_tokens(self._to_device(tensors)).cpu().numpy().astype(np.int64)

    def episodes_ended(self, ended: np.ndarray) -> None:
        """Rollouts: envs whose episode ended draw a new exploration token at their next
        chunk (`unilab.runtime.policy.EpisodicPolicy`)."""
        if self.token_sampler is not None:
            self.token_sampler.episodes_ended(ended)

    def context(
        self,
        obs: Obs,
        drop: bool = False,
        nulls: Sequence[str] = (),
        generator: torch.Generator | None = None,
    ) -> ExpertContext:
        """Encode the prefix once: the context every action-expert call reads."""
        return self._head_context(self.encode(obs, drop, nulls, generator))

    def encode(
        self,
        obs: Obs,
        drop: bool = False,
        nulls: Sequence[str] = (),
        generator: torch.Generator | None = None,
    ) -> Prefix:
        """The fused prefix tokens of `obs` (conditions dropped / nulled as asked)."""
        n = next(iter(obs.values())).shape[0]
        return self.prefix(dict(obs), self.condition_rows(obs, n, drop, nulls, generator))

    def _head_context(self, prefix: Prefix) -> ExpertContext:
        head = self.expert if self.expert is not None else self._gaussian().regressor
        return head.context(prefix)

    def _gaussian(self) -> GaussianChunkHead:
        assert self.gaussian is not None
        return self.gaussian

    def _expert(self) -> ActionExpert:
        if self.expert is None:
            raise ValueError("this VLA has an MSE head; flow sampling needs head='flow'")
        return self.expert

    # -- training (statistics, the loss, value predictions: `training_loss.py`) ------------
    def fit_normalizers(
        self,
        proprio: torch.Tensor | None,
        actions: torch.Tensor,
        state: torch.Tensor | None = None,
        value_targets: ValueTargets | None = None,
    ) -> None:
        """Set the proprioception, action (and state-head target) statistics from training
        data (rows, d), and the value heads' time scale from `value_targets`
        (`training_loss.fit_policy_normalizers`)."""
        fit_policy_normalizers(self, proprio, actions, state, value_targets)

    def loss(
        self,
        obs: Obs,
        actions: torch.Tensor,
        is_pad: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        drop_conditions: bool = True,
        state: torch.Tensor | None = None,
        state_weight: float = 0.0,
        value_targets: ValueTargets | None = None,
        value_weight: float = 0.0,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training loss (flow or MSE, plus state and value heads): see
        `training_loss.policy_loss`, which documents every argument."""
        return policy_loss(
            self, obs, actions, is_pad, generator, drop_conditions, state, state_weight,
            value_targets, value_weight,
        )  # fmt: skip

    def predict_values(self, obs: Obs) -> dict[str, torch.Tensor]:
        """The value heads' predictions for `obs` (no conditions dropped): {"success":
        P(success), "progress": in [0, 1], "time_to_go": seconds}, each (N,), for play,
        eval and alerts (`training_loss.predict_policy_values`)."""
        return predict_policy_values(self, obs)

    # -- sampling -------------------------------------------------------------------------
    def _velocity_fn(
        self, ctx: ExpertContext, scale: float | None, num_steps: int
    ) -> Callable[[torch.Tensor, int], torch.Tensor]:
        """v(x, k) on the `num_steps` Euler grid; with guidance the context holds
        [cond; uncond] rows."""
        expert = self._expert()
        mods = expert.step_modulations(ctx, time_grid(num_steps, self.device)[:-1])
        if scale is None:
            return lambda x, k: expert.run(ctx, mods[k], x)[0]

        def velocity(x: torch.Tensor, k: int) -> torch.Tensor:
            v2, _ = expert.run(ctx, mods[k], torch.cat([x, x]))
            n = x.shape[0]  # slices, not chunk(2): chunk puts a guard on a symbolic batch
            return guided(v2[:n], v2[n:], scale)

        return velocity

    def _guided_context(self, obs: Obs, scale: float | None) -> ExpertContext:
        """The context, batch-stacked [conditional; unconditional] when guiding."""
        if scale is None:
            return self.context(obs)
        nulls = [c for c in self.cfg.guidance_drop if c in self.prefix.conditions]
        if not nulls:
            raise ValueError(
                f"guidance needs a condition to drop: guidance_drop={self.cfg.guidance_drop}, "
                f"enabled conditions {self.condition_names}"
            )
        n = next(iter(obs.values())).shape[0]
        both = {k: torch.cat([v, v]) for k, v in obs.items()}
        rows = self.condition_rows(obs, n)
        null_rows = self.condition_rows(obs, n, nulls=nulls)
        stacked = {k: torch.cat([rows[k], null_rows[k]]) for k in rows}
        return self._expert().context(self.prefix(both, stacked))

    def sample_normalized(
        self,
        obs: Obs,
        noise: torch.Tensor,
        guidance_scale: float | None = None,
        num_steps: int | None = None,
    ) -> torch.Tensor:
        """The ODE sample from `noise` (N, H, A) at t = 1, normalized units, in `num_steps`
        Euler steps (None: the policy's K)."""
        steps = self.num_steps if num_steps is None else int(num_steps)
        ctx = self._guided_context(obs, guidance_scale)
        return euler_integrate(self._velocity_fn(ctx, guidance_scale, steps), noise, steps)

    def forward(self, obs: Obs, noise: torch.Tensor) -> torch.Tensor:
        """The deterministic path (what export traces): observations and the initial noise
        (N, H, A) -> action chunk (N, H, A) in task units, with the configured guidance.
        The MSE head ignores the noise and returns its mean."""
        if self.gaussian is not None:
            return self.action_norm.unnormalize(self._gaussian().mean(self.context(obs)))
        out = self.sample_normalized(obs, noise, self.cfg.guidance_scale)
        return self.action_norm.unnormalize(out)

    def draw_noise(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        shape = (n, self.horizon, self.action_dim)
        return torch.randn(shape, generator=generator, device="cpu").to(self.device)

    @torch.inference_mode()  # cheaper per op than no_grad; the chunks are data, not graph
    def sample(
        self,
        obs: Obs,
        deterministic: bool = False,
        noise: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Action chunks (N, H, A) and per-chunk log-probabilities (N,) or None.

        Flow head: the ODE from `noise` (drawn when None; zeros when `deterministic` and
        None), log-prob None; with `flow_noise` and not deterministic, a stochastic chain
        and its exact log-prob (normalized units). MSE head: the mean when deterministic,
        else mean + std * noise with its Gaussian log-prob."""
        n = self.check_obs(obs)
        obs = self._to_device(obs)
        if noise is None:
            noise = (
                torch.zeros(n, self.horizon, self.action_dim, device=self.device)
                if deterministic
                else self.draw_noise(n, generator)
            )
        noise = noise.to(self.device, torch.float32)
        if tuple(noise.shape) != (n, self.horizon, self.action_dim):
            raise ValueError(
                f"noise has shape {tuple(noise.shape)}; expected {(n, self.horizon, self.action_dim)}"
            )
        if self.gaussian is not None:
            mean = self._gaussian().mean(self.context(obs))
            if deterministic:
                return self.action_norm.unnormalize(mean), None
            std = self._gaussian().log_std.exp()
            sample = mean + std * noise
            logp = self._gaussian().log_prob(mean, sample).sum((1, 2))
            return self.action_norm.unnormalize(sample), logp
        if self.noise_head is not None and not deterministic:
            chain = self.sample_chain(obs, noise, generator=generator)
            return self.action_norm.unnormalize(chain.actions), chain.log_prob.sum(-1)
        return self.forward(obs, noise), None

    # -- chains with log-probabilities (RL: `noisy_chain.py`) -----------------------------
    def sample_chain(
        self,
        obs: Obs,
        noise: torch.Tensor | None = None,
        step_noise: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> Chain:
        """A stochastic K-step chain (normalized units) with its exact log-probability
        (`noisy_chain.sample_noisy_chain`)."""
        return sample_noisy_chain(self, obs, noise, step_noise, generator)

    def chain_log_prob(self, obs: Obs, states: torch.Tensor) -> torch.Tensor:
        """(N, H) log-probability of stored chains (N, K + 1, H, A) under the current
        parameters, differentiable (`noisy_chain.noisy_chain_log_prob`)."""
        return noisy_chain_log_prob(self, obs, states)

    # -- chunked execution (the numpy planner and best-of-N: `planner.py`) ---------------
    def planner(
        self,
        guidance_scale: float | None = None,
        best_of_n: int = 1,
        noise_temperature: float = 1.0,
        seed: int = 0,
        flow_steps: int | None = None,
    ) -> Planner:
        """(obs as numpy, noise (n, H, A)) -> chunks (n, H, A) numpy for
        `chunking.ChunkExecutor`: guidance at `guidance_scale` (None: the configured one),
        `best_of_n` candidates ranked by the value heads, `flow_steps` Euler steps (None:
        the policy's K) (`planner.make_planner`)."""
        return make_planner(self, guidance_scale, best_of_n, noise_temperature, seed, flow_steps)

    def check_best_of_n(self) -> None:
        """A ValueError unless best-of-N can rank candidates (`planner.check_best_of_n`)."""
        check_best_of_n(self)

    def executor(
        self,
        num_envs: int,
        seed: int = 0,
        n_act: int | None = None,
        ensemble_decay: float | None = None,
        noise_temperature: float = 1.0,
        guidance_scale: float | None = None,
        best_of_n: int = 1,
        hold_token: bool | None = None,
        flow_steps: int | None = None,
    ) -> ChunkExecutor:
        """Chunked execution of this policy over `num_envs` envs (what rollouts use): the
        configured `n_act` and temporal ensembling unless given, initial noise drawn from
        `seed` and scaled by `noise_temperature` (the MSE head executes its mean), guidance
        at `guidance_scale` (None: the configured one), `best_of_n` candidates per re-plan
        ranked by the value heads (`planner`), each chunk integrated in `flow_steps` Euler
        steps (None: the policy's K); `hold_token` (None: the configured
        `selector_holds_token`) keeps the selector's token for each episode."""
        hold = self.cfg.selector_holds_token if hold_token is None else hold_token
        choice = ("token", self.choose_tokens) if self.selector is not None and hold else None
        return ChunkExecutor(
            self.planner(
                guidance_scale, int(best_of_n), float(noise_temperature), seed, flow_steps
            ),
            num_envs,
            self.horizon,
            self.action_dim,
            self.cfg.n_act if n_act is None else n_act,
            self.cfg.ensemble_decay if ensemble_decay is None else ensemble_decay,
            seed,
            noise_temperature,
            hold=choice,
        )


def count_parameters(module: nn.Module) -> dict[str, Any]:
    """Parameter counts per top-level part, and the total."""
    parts = {
        name: sum(p.numel() for p in child.parameters()) for name, child in module.named_children()
    }
    parts["total"] = sum(p.numel() for p in module.parameters())
    return parts
