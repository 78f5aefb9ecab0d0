"""`unilab tune-inference`: choose a chunked policy's inference settings from episodes.

Each round `SettingsBandit.propose()` picks one value per setting, `evaluate` runs
`episodes_per_round` episodes (one per env) of the policy with those settings on that
round's task seed, the posteriors get the successes out of the episodes, and every
posterior decays by `decay`. At the end `best()` is the choice, and the choice and the
policy's own defaults are evaluated again at equal budget on fresh seeds (seeds the rounds
never used; both arms on the same seeds, so the same start states) for the report.

Settings (`inference_tuning.DEFAULT_SPACE`) and where each acts:

- `n_act`, `ensemble_decay`: the chunk executor (`ChunkExecutor`), any chunked policy;
- `noise_temperature`: the executor scales the flow's initial noise (flow heads only: an
  MSE head executes its mean and ignores the noise);
- `guidance_scale`: classifier-free guidance in the torch VLA's planner; needs a condition
  to drop (`guidance_drop` among the model's conditions). An ONNX graph has its guidance
  compiled in, so it is not tunable there;
- `best_of_n`: the torch VLA's planner ranks N candidates with its value heads; needs value
  heads and behaviour tokens (the heads read the observation and conditions, not the chunk);
- `flow_steps`: the torch VLA's planner integrates each chunk in K Euler steps (flow head;
  an ONNX graph has its K unrolled inside, so tune the run and re-export).

A setting the policy cannot use is left out of the space with a note in the report
(`skipped`), never silently; values it cannot take (n_act above the horizon) likewise.
The evaluation loop is `unilab.runtime.rollout.rollout`: no logging per step.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from unilab.config.schema import SimConfig, TaskConfig
from unilab.deploy.evaluate import evaluate
from unilab.deploy.inference_tuning import DEFAULT_SPACE, SettingsBandit, SettingValue
from unilab.deploy.policy_source import LoadedPolicy
from unilab.policies.vla.config import CONDITIONS
from unilab.runtime.policy import ActionChunk, Policy, StepExecutor
from unilab.runtime.torch_policy import own_executor

SCHEMA = "unilab.tune_inference/1"
SETTINGS = tuple(DEFAULT_SPACE)
"""The settings this tuner knows how to apply."""
COMPARE_SEED_OFFSET = 100_000
"""Fresh seeds for the final comparison start this far above the tuning seeds."""


class TuneError(ValueError):
    """The policy or task cannot be tuned (no chunk executor, no success metric, ...)."""


def parse_space(items: Sequence[str]) -> dict[str, list[SettingValue]]:
    """`["n_act=2,4,8", "ensemble_decay=none,0.01"]` -> {"n_act": [2, 4, 8], ...}:
    ints, floats, true/false and none/null as JSON scalars."""
    space: dict[str, list[SettingValue]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise TuneError(f"--space item {item!r} must be NAME=V1,V2,... e.g. n_act=2,4,8")
        if name not in SETTINGS:
            raise TuneError(f"unknown setting {name!r}; settings: {', '.join(SETTINGS)}")
        space[name] = [_scalar(v.strip()) for v in text.split(",") if v.strip()]
    return space


def _scalar(text: str) -> SettingValue:
    low = text.lower()
    if low in ("none", "null", "off"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# -- what a policy can use ------------------------------------------------------------------
def _inner(policy: Any) -> Any:
    """The torch module behind a `NumpyPolicy`, else the policy itself."""
    return getattr(policy, "policy", policy)


def policy_defaults(policy: Policy[np.ndarray]) -> dict[str, SettingValue]:
    """The policy's own value of each setting (what it runs without tuning)."""
    from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy
    from unilab.policies.vla.policy import VLAPolicy

    inner = _inner(policy)
    chunked = own_executor(policy)
    defaults: dict[str, SettingValue] = {
        "noise_temperature": 1.0,
        "best_of_n": 1,
        "guidance_scale": 1.0,
    }
    if isinstance(inner, VLAPolicy):
        defaults["flow_steps"] = int(inner.num_steps)
        defaults["n_act"] = int(inner.cfg.n_act)
        defaults["ensemble_decay"] = inner.cfg.ensemble_decay
        scale = inner.cfg.guidance_scale
        defaults["guidance_scale"] = 1.0 if scale is None else float(scale)
    elif isinstance(inner, OnnxVLAPolicy):
        meta = inner.metadata
        defaults.update(n_act=int(meta.n_act), ensemble_decay=meta.ensemble_decay)
        defaults["noise_temperature"] = float(meta.noise_temperature)
        defaults["flow_steps"] = int(meta.num_steps)
    elif chunked is not None:
        probe = chunked.executor(1)
        defaults["n_act"] = int(getattr(probe, "n_act", policy.action_horizon))
        defaults["ensemble_decay"] = getattr(probe, "ensemble_decay", None)
    return defaults


def usable_space(
    policy: Policy[np.ndarray], space: Mapping[str, Sequence[SettingValue]]
) -> tuple[dict[str, list[SettingValue]], dict[str, str]]:
    """(the part of `space` this policy can use, {setting: why it was left out})."""
    chunked = own_executor(policy)
    if chunked is None:
        raise TuneError(
            f"{type(_inner(policy)).__name__} executes no chunks (no executor of its own): "
            "there are no inference settings to tune; tune-inference is for chunked "
            "policies (the VLA)"
        )
    inner = _inner(policy)
    params = set(inspect.signature(chunked.executor).parameters)
    horizon = int(policy.action_horizon)
    usable: dict[str, list[SettingValue]] = {}
    notes: dict[str, str] = {}
    for name, values in space.items():
        if name not in SETTINGS:
            raise TuneError(f"unknown setting {name!r}; settings: {', '.join(SETTINGS)}")
        why = _why_not(name, inner, params, type(chunked).__name__)
        if why:
            notes[name] = why
            continue
        kept = list(values)
        if name == "n_act":
            kept = [v for v in values if isinstance(v, int) and 1 <= v <= horizon]
            dropped = [v for v in values if v not in kept]
            if dropped:
                notes["n_act"] = f"values {dropped} left out: n_act must be in [1, {horizon}]"
        if name in ("best_of_n", "flow_steps"):
            kept = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 1]
            dropped = [v for v in values if v not in kept]
            if dropped:
                notes[name] = f"values {dropped} left out: {name} must be an integer >= 1"
        if kept:
            usable[name] = kept
        else:
            notes[name] = notes.get(name, f"no usable value in {list(values)}")
    if not usable:
        raise TuneError(f"no setting of the space is usable by this policy: {notes}")
    return usable, notes


def _why_not(name: str, inner: object, params: set[str], owner: str) -> str:
    """Why the policy cannot use setting `name` ('' when it can)."""
    from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy
    from unilab.policies.vla.policy import VLAPolicy

    if name in ("n_act", "ensemble_decay"):
        return ""
    if name not in params:
        where = "the exported ONNX graph" if isinstance(inner, OnnxVLAPolicy) else "this policy"
        if name == "guidance_scale" and isinstance(inner, OnnxVLAPolicy):
            return (
                "guidance is compiled into the ONNX graph; tune the run directory and "
                "re-export (`unilab export RUN --inference-settings FILE`)"
            )
        if name == "best_of_n" and isinstance(inner, OnnxVLAPolicy):
            return "the ONNX graph holds no value heads to rank candidates; tune the run directory"
        if name == "flow_steps" and isinstance(inner, OnnxVLAPolicy):
            return (
                "the Euler steps are unrolled in the ONNX graph; tune the run directory and "
                "re-export (`unilab export RUN --inference-settings FILE`)"
            )
        return f"{where} ({owner}) has no {name} in its executor"
    head = getattr(inner, "head", None) or getattr(getattr(inner, "metadata", None), "head", None)
    if name == "noise_temperature" and head == "mse":
        return "the MSE head executes its mean and ignores the noise"
    if name == "flow_steps" and head == "mse":
        return "the MSE head predicts its chunk in one pass; there is no flow to integrate"
    if name == "guidance_scale" and isinstance(inner, VLAPolicy):
        if inner.head != "flow":
            return "guidance needs the flow head"
        drop = [c for c in inner.cfg.guidance_drop if c in inner.prefix.conditions]
        if not drop:
            return (
                f"guidance needs a condition to drop: guidance_drop={inner.cfg.guidance_drop} "
                f"but the model's conditions are {inner.condition_names or 'none'}"
            )
    if name == "best_of_n" and isinstance(inner, VLAPolicy):
        try:
            inner.check_best_of_n()
        except ValueError as exc:
            return str(exc)
    return ""


# -- a policy with settings applied ---------------------------------------------------------
class TunedPolicy:
    """`Policy[np.ndarray]` and `ChunkedPolicy`: `policy` whose executor runs with
    `settings` (the tuned ones override what rollout passes)."""

    def __init__(self, policy: Policy[np.ndarray], settings: Mapping[str, SettingValue]) -> None:
        chunked = own_executor(policy)
        if chunked is None:
            raise TuneError(f"{type(policy).__name__} has no chunk executor to tune")
        self.policy = policy
        self.chunked = chunked
        self.settings = dict(settings)

    @property
    def obs_groups(self) -> tuple[str, ...]:
        """The groups the task must provide: the VLA's optional conditions (token,
        advantage) are left out; absent, they are null or the token selector's pick."""
        return tuple(g for g in self.policy.obs_groups if g not in CONDITIONS)

    @property
    def action_dim(self) -> int:
        return int(self.policy.action_dim)

    @property
    def action_horizon(self) -> int:
        return int(self.policy.action_horizon)

    def act(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = False
    ) -> ActionChunk[np.ndarray]:
        return self.policy.act(obs, deterministic)

    def act_inference(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.policy.act_inference(obs)

    def episodes_ended(self, ended: np.ndarray) -> None:
        hook = getattr(self.policy, "episodes_ended", None)
        if hook is not None:
            hook(ended)

    def executor(
        self,
        num_envs: int,
        seed: int = 0,
        n_act: int | None = None,
        ensemble_decay: float | None = None,
    ) -> StepExecutor:
        s = self.settings
        tuned = ("noise_temperature", "guidance_scale", "best_of_n", "flow_steps")
        extra = {k: s[k] for k in tuned if k in s}
        make: Any = self.chunked.executor  # the VLA's executors take the extra settings
        executor: StepExecutor = make(
            num_envs,
            seed=seed,
            n_act=s.get("n_act", n_act),
            ensemble_decay=s.get("ensemble_decay", ensemble_decay),
            **extra,
        )
        return executor


def with_settings(policy: LoadedPolicy, settings: Mapping[str, SettingValue]) -> LoadedPolicy:
    return LoadedPolicy(
        TunedPolicy(policy.policy, settings), policy.metadata, policy.source, policy.kind
    )


def with_checked_settings(
    policy: LoadedPolicy, settings: Mapping[str, SettingValue]
) -> LoadedPolicy:
    """`with_settings`, after checking that the policy can use every one of `settings`; a
    TuneError saying why not (nothing is silently left out of a run)."""
    _, skipped = usable_space(policy.policy, {k: [v] for k, v in settings.items()})
    if skipped:
        raise TuneError(f"{skipped}")
    return with_settings(policy, settings)


# -- the tuning loop ------------------------------------------------------------------------
@dataclass
class Arm:
    """Success of one settings choice over some episodes."""

    settings: dict[str, SettingValue]
    successes: int
    episodes: int
    return_mean: float

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "successes": self.successes,
            "episodes": self.episodes,
            "success_rate": self.success_rate,
            "return_mean": self.return_mean,
        }


def run_settings(
    policy: LoadedPolicy,
    task_cfg: TaskConfig,
    sim_cfg: SimConfig,
    settings: Mapping[str, SettingValue],
    seeds: Sequence[int],
    episodes: int,
) -> Arm:
    """`episodes` episodes per seed of `policy` with `settings` (the eval protocol)."""
    report = evaluate(
        with_settings(policy, settings), task_cfg, sim_cfg, episodes=episodes, seeds=seeds
    )
    if report["success_rate"] is None:
        raise TuneError(
            f"task {task_cfg.name!r} reports no success metric: the tuner scores settings by "
            "success"
        )
    rows = report["episodes"]
    return Arm(
        dict(settings),
        int(sum(bool(r["success"]) for r in rows)),
        len(rows),
        float(report["return"]["mean"]),
    )


def tune_inference(
    policy: LoadedPolicy,
    task_cfg: TaskConfig,
    sim_cfg: SimConfig,
    *,
    space: Mapping[str, Sequence[SettingValue]] | None = None,
    rounds: int = 10,
    episodes_per_round: int = 8,
    seed: int = 0,
    decay: float = 0.9,
    compare_seeds: int | None = None,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Tune `policy`'s inference settings; -> the JSON report (see `SCHEMA` keys below).
    `on_round` gets each round's history row as it ends, and then one row per comparison
    arm ({"compare": "defaults" | "chosen", ...}), for progress output.

    Round r evaluates on task seed `seed + r`; the comparison uses `compare_seeds` fresh
    seeds (default: `rounds`, so each arm gets as many episodes as the tuning did) from
    `seed + COMPARE_SEED_OFFSET`, `episodes_per_round` episodes each, for the defaults and
    the choice alike. Report: schema, task, source, space (used), skipped {setting: why},
    defaults, rounds [{round, seed, settings, successes, episodes, success_rate}], means
    {setting: [posterior mean per value]}, chosen, comparison {seeds, episodes_per_arm,
    defaults, chosen (each an `Arm` dict), difference}, recommended and recommendation
    (`recommend`), bandit (its JSON state), wall_s."""
    if rounds < 1 or episodes_per_round < 1:
        raise TuneError(f"rounds={rounds} and episodes_per_round={episodes_per_round} must be >= 1")
    t0 = time.perf_counter()
    used, skipped = usable_space(policy.policy, DEFAULT_SPACE if space is None else space)
    own = policy_defaults(policy.policy)
    defaults = {k: own[k] for k in used}
    bandit = SettingsBandit(used, decay=decay, seed=seed)
    history: list[dict[str, Any]] = []
    for r in range(rounds):
        proposal = bandit.propose()
        arm = run_settings(policy, task_cfg, sim_cfg, proposal, [seed + r], episodes_per_round)
        bandit.update(proposal, arm.successes, arm.episodes)
        bandit.decay_round()
        history.append({"round": r, "seed": seed + r, **arm.to_dict()})
        if on_round is not None:
            on_round(history[-1])
    chosen = bandit.best()
    n_seeds = rounds if compare_seeds is None else int(compare_seeds)
    fresh = [seed + COMPARE_SEED_OFFSET + i for i in range(max(1, n_seeds))]
    base = run_settings(policy, task_cfg, sim_cfg, defaults, fresh, episodes_per_round)
    if on_round is not None:
        on_round({"compare": "defaults", **base.to_dict()})
    best = run_settings(policy, task_cfg, sim_cfg, chosen, fresh, episodes_per_round)
    if on_round is not None:
        on_round({"compare": "chosen", **best.to_dict()})
    return {
        "schema": SCHEMA,
        "task": task_cfg.name,
        "source": policy.source,
        "space": used,
        "skipped": skipped,
        "defaults": defaults,
        "rounds": history,
        "episodes_per_round": episodes_per_round,
        "decay": decay,
        "means": bandit.means(),
        "chosen": chosen,
        **recommend(chosen, defaults, best, base),
        "comparison": {
            "seeds": fresh,
            "episodes_per_arm": base.episodes,
            "defaults": base.to_dict(),
            "chosen": best.to_dict(),
            "difference": best.success_rate - base.success_rate,
        },
        "bandit": json.loads(bandit.to_json()),
        "wall_s": time.perf_counter() - t0,
    }


def recommend(
    chosen: Mapping[str, SettingValue],
    defaults: Mapping[str, SettingValue],
    chosen_arm: Arm,
    defaults_arm: Arm,
) -> dict[str, Any]:
    """{"recommended": settings, "recommendation": why}: the bandit's choice when it beat
    the defaults on the fresh comparison episodes, else the defaults. The bandit's `best()`
    is the highest posterior mean even when no value is really better than the policy's
    own (arm_move_side from images, stop 48: chosen 0.20 against defaults 0.22), so
    exporting it unchecked could ship worse settings."""
    if chosen_arm.success_rate > defaults_arm.success_rate:
        why = (
            f"the choice beat the defaults on the fresh episodes "
            f"({chosen_arm.success_rate:.2f} vs {defaults_arm.success_rate:.2f})"
        )
        return {"recommended": dict(chosen), "recommendation": why}
    why = (
        f"the choice did not beat the defaults on the fresh episodes "
        f"({chosen_arm.success_rate:.2f} vs {defaults_arm.success_rate:.2f}): keep the defaults"
    )
    return {"recommended": dict(defaults), "recommendation": why}


def settings_of(doc: Mapping[str, Any]) -> dict[str, SettingValue]:
    """The settings in a tune report (its `recommended`; `chosen` in reports written
    before recommendations) or a plain {setting: value} object, checked against the known
    settings."""
    settings = doc.get("recommended", doc.get("chosen", doc)) if "schema" in doc else doc
    if not isinstance(settings, Mapping):
        raise TuneError(f"inference settings must be an object, got {type(settings).__name__}")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise TuneError(f"unknown inference settings {unknown}; settings: {', '.join(SETTINGS)}")
    return dict(settings)
