"""`unilab eval`: a policy over several seeds, one unbiased episode per env, as JSON.

For each seed a task with `episodes` envs starts from that seed; each env's first episode
is counted and the step loop runs until every env has finished one (envs that finish
early run on uncounted, so short episodes are not over-represented).

Report schema (`SCHEMA` = "unilab.eval/1"; `validate_report` checks it):

    schema            "unilab.eval/1"
    task              task name
    policy            "trained" | "zero" | "random"
    source            checkpoint or ONNX file the metadata came from
    seeds             [int, ...]
    episodes_per_seed int
    num_episodes      int = len(seeds) * episodes_per_seed
    return            {"mean", "std", "min", "max"} over all episodes (floats)
    length            {"mean", "std", "min", "max"} in control steps
    success_rate      float in [0, 1], or null when the task reports no `success` metric
    termination_reasons  {reason: episodes that ended with it}; an episode can count under
                      several reasons; "time_out" marks truncation
    metrics           {name: mean over episodes} of each task metric's per-episode mean
                      (velocity tracking error, lift height, distance, ...; `success` too)
    per_seed          [{"seed", "return_mean", "return_std", "length_mean",
                        "success_rate", "termination_reasons", "metrics"}, ...]
    episodes          [{"seed", "env", "return", "length", "success", "reasons",
                        "metrics"}, ...]
    wall_s            float
    execution         (optional, chunked policies) {"n_act", "ensemble_decay",
                      "noise_seed": "seed", and for a flow VLA loaded from its run
                      "flow_steps"; "inference_settings" when run with tuned ones}: how
                      chunks were executed; the flow's noise of each seed's episodes is
                      drawn from that seed
    failure_states    (optional, --save-failures) {"dir", "before_s", "count"}: env states
                      saved about before_s seconds before each failed episode ended
                      (unilab.deploy.failure_states; index.json in dir lists them)
    start_states      (optional, --from-states) {"source", "count"}: every env started from
                      a stored state (env i from state i mod count) instead of a reset
    alerts            (optional, --alerts; policies with value heads) {"success_threshold",
                      "stall_seconds", "stall_epsilon", "precision", "recall",
                      "mean_lead_s", "median_lead_s" (each a number or null when
                      undefined), "alerted_episodes", "failed_episodes", "true_alerts",
                      "scored_episodes", "by_kind": {kind: count}, "predictions", and with
                      --alert-sweep "sweep": [{"rule", "value", the same scores}]}: live
                      failure alerts from the policy's value heads at each re-plan, scored
                      against the outcomes; the sweep replays each rule alone at other
                      thresholds on the same episodes (unilab.deploy.live_alerts)
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unilab.config.schema import SimConfig, TaskConfig
from unilab.deploy.live_alerts import AlertMonitor, AlertOptions, alerts_report
from unilab.deploy.policy_source import LoadedPolicy, baseline_policy
from unilab.runtime.rollout import SUCCESS_METRIC, StepInfo, rollout
from unilab.tasks.env_state import EnvState

SCHEMA = "unilab.eval/1"
__all__ = ["SCHEMA", "SUCCESS_METRIC", "EvalSchemaError", "evaluate", "validate_report"]


class EvalSchemaError(ValueError):
    """An eval report that does not follow `SCHEMA`; lists every problem."""


def evaluate(
    policy: LoadedPolicy,
    task_cfg: TaskConfig,
    sim_cfg: SimConfig,
    *,
    episodes: int = 10,
    seeds: Sequence[int] = (0,),
    kind: str = "trained",
    n_act: int | None = None,
    ensemble_decay: float | None = None,
    save_failures: str | Path | None = None,
    before_s: float = 1.0,
    start_states: Sequence[EnvState] | None = None,
    start_source: str = "",
    alerts: AlertOptions | None = None,
) -> dict[str, Any]:
    """Chunked policies (the VLA) execute `n_act` actions per chunk with optional temporal
    ensembling (default: the policy's own settings); the noise seed is the task seed.

    `save_failures`: a directory for the env state about `before_s` seconds before each
    failed episode's end. `start_states`: start env i from state i mod len(start_states)
    (saved by a task of the same config) instead of a fresh reset: a targeted evaluation.
    `alerts`: live failure alerts from the policy's value heads (`AlertMonitor`), scored
    in the report's `alerts` entry; a `NoValueHeadsError` for a policy without them.
    """
    from unilab.deploy.failure_states import FailureStateRecorder, restore_states, write_index
    from unilab.runtime.torch_policy import own_executor
    from unilab.tasks.registry import make_task

    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be at least 1")
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    t0 = time.perf_counter()
    if start_states is not None and not start_states:
        raise ValueError("start_states is empty: give at least one env state")
    if alerts is not None:
        if kind != "trained":
            raise ValueError(f"alerts need the trained policy's value heads, not {kind!r}")
        from unilab.deploy.live_alerts import value_policy

        value_policy(policy.policy)  # fail before any episode runs
    monitors: list[AlertMonitor] = []
    rows: list[dict[str, Any]] = []
    saved: list[dict[str, Any]] = []
    has_success = False
    for seed in seeds:
        chosen = baseline_policy(kind, policy, seed).policy
        task = make_task(task_cfg, num_envs=episodes, seed=int(seed), sim_cfg=sim_cfg)
        chunked = own_executor(chosen) is not None
        recorder = (
            FailureStateRecorder(task, save_failures, int(seed), before_s)
            if save_failures is not None
            else None
        )
        hooks: list[Any] = [] if recorder is None else [recorder]
        if alerts is not None:
            monitors.append(AlertMonitor(chosen, episodes, task.control_dt, alerts))
            hooks.append(monitors[-1])
        obs = None
        if start_states is not None:
            task.reset()
            obs = restore_states(task, list(start_states))
        result = rollout(
            task,
            chosen,
            episodes=episodes,
            one_per_env=True,
            steps=task.max_episode_steps + 1,
            n_act=n_act if chunked else None,
            ensemble_decay=ensemble_decay if chunked else None,
            noise_seed=int(seed),
            on_step=_chain(hooks),
            obs=obs,
        )
        if recorder is not None:
            saved.extend(recorder.written)
        task.close()
        has_success = has_success or result.has_success
        rows.extend({"seed": int(seed), **e.to_dict()} for e in result.episodes)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "task": task_cfg.name,
        "policy": kind,
        "source": policy.source,
        "seeds": [int(s) for s in seeds],
        "episodes_per_seed": episodes,
        "num_episodes": len(rows),
        **_summary(rows, has_success),
        "per_seed": [
            _seed_summary(s, [r for r in rows if r["seed"] == s], has_success) for s in seeds
        ],
        "episodes": rows,
        "wall_s": time.perf_counter() - t0,
    }
    if save_failures is not None:
        write_index(
            save_failures,
            saved,
            {"task": task_cfg.name, "source": policy.source, "policy": kind, "before_s": before_s},
        )
        report["failure_states"] = {
            "dir": str(save_failures),
            "before_s": float(before_s),
            "count": len(saved),
        }
    if start_states is not None:
        report["start_states"] = {"source": start_source, "count": len(start_states)}
    if alerts is not None:
        report["alerts"] = alerts_report(monitors, alerts)
    executor = own_executor(policy.policy) if kind == "trained" else None
    if executor is not None:
        probe = executor.executor(1, n_act=n_act, ensemble_decay=ensemble_decay)
        report["execution"] = {
            "n_act": int(getattr(probe, "n_act", n_act or 0)),
            "ensemble_decay": getattr(probe, "ensemble_decay", ensemble_decay),
            "noise_seed": "seed",
        }
        inner = getattr(policy.policy, "policy", None)  # a NumpyPolicy's torch policy
        tuned = getattr(policy.policy, "settings", None)  # a tune_inference.TunedPolicy's
        if isinstance(tuned, dict):
            report["execution"]["inference_settings"] = dict(tuned)
            inner = getattr(inner, "policy", None)
        if getattr(inner, "head", None) == "flow":
            steps = (tuned or {}).get("flow_steps") or inner.num_steps  # type: ignore[union-attr]
            report["execution"]["flow_steps"] = int(steps)
    validate_report(report)
    return report


def _chain(hooks: list[Any]) -> Any:
    """One `on_step` hook calling each of `hooks` in order (None when there are none)."""
    if not hooks:
        return None
    if len(hooks) == 1:
        return hooks[0]

    def on_step(info: StepInfo) -> None:
        for hook in hooks:
            hook(info)

    return on_step


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(a.mean()),
        "std": float(a.std()),
        "min": float(a.min()),
        "max": float(a.max()),
    }


def _success_rate(rows: list[dict[str, Any]], has_success: bool) -> float | None:
    if not has_success:
        return None
    return float(np.mean([bool(r["success"]) for r in rows]))


def _reasons(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts = Counter(reason for r in rows for reason in r["reasons"])
    return dict(sorted(counts.items()))


def _summary(rows: list[dict[str, Any]], has_success: bool) -> dict[str, Any]:
    return {
        "return": _stats([r["return"] for r in rows]),
        "length": _stats([r["length"] for r in rows]),
        "success_rate": _success_rate(rows, has_success),
        "termination_reasons": _reasons(rows),
        "metrics": _metric_means(rows),
    }


def _metric_means(rows: list[dict[str, Any]]) -> dict[str, float]:
    names = sorted({k for r in rows for k in r.get("metrics", {})})
    return {k: float(np.mean([r["metrics"][k] for r in rows if k in r["metrics"]])) for k in names}


def _seed_summary(seed: int, rows: list[dict[str, Any]], has_success: bool) -> dict[str, Any]:
    returns = np.asarray([r["return"] for r in rows], dtype=np.float64)
    return {
        "seed": int(seed),
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "length_mean": float(np.mean([r["length"] for r in rows])),
        "success_rate": _success_rate(rows, has_success),
        "termination_reasons": _reasons(rows),
        "metrics": _metric_means(rows),
    }


_TOP = {
    "schema": str,
    "task": str,
    "policy": str,
    "source": str,
    "seeds": list,
    "episodes_per_seed": int,
    "num_episodes": int,
    "return": dict,
    "length": dict,
    "termination_reasons": dict,
    "per_seed": list,
    "episodes": list,
    "wall_s": float,
}
_EPISODE = {"seed": int, "env": int, "return": float, "length": int, "reasons": list}
_SEED = {
    "seed": int,
    "return_mean": float,
    "return_std": float,
    "length_mean": float,
    "termination_reasons": dict,
}


def _check_fields(obj: Any, spec: dict[str, type], where: str, problems: list[str]) -> bool:
    if not isinstance(obj, dict):
        problems.append(f"{where} is {type(obj).__name__}, expected an object")
        return False
    for key, typ in spec.items():
        if key not in obj:
            problems.append(f"{where}: missing {key!r}")
        elif typ is float and isinstance(obj[key], int | float) and not isinstance(obj[key], bool):
            if not math.isfinite(float(obj[key])):
                problems.append(f"{where}.{key} is not finite")
        elif not isinstance(obj[key], typ) or (typ is int and isinstance(obj[key], bool)):
            problems.append(f"{where}.{key} is {type(obj[key]).__name__}, expected {typ.__name__}")
    return True


def _check_rate(value: Any, where: str, problems: list[str]) -> None:
    if value is not None and not (isinstance(value, float | int) and 0.0 <= value <= 1.0):
        problems.append(f"{where} must be null or a number in [0, 1], got {value!r}")


def _check_metrics(value: Any, where: str, problems: list[str]) -> None:
    """Optional (reports before task metrics lack it): {name: finite number}."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str)
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(float(v))
        for k, v in value.items()
    ):
        problems.append(f"{where} must map metric names to finite numbers, got {value!r}")


def validate_report(report: Any) -> None:
    """Raise `EvalSchemaError` naming every way `report` departs from `SCHEMA`."""
    problems: list[str] = []
    if not _check_fields(report, _TOP, "report", problems):
        raise EvalSchemaError(problems[0])
    if report.get("schema") != SCHEMA:
        problems.append(f"report.schema is {report.get('schema')!r}, expected {SCHEMA!r}")
    if report.get("policy") not in ("trained", "zero", "random"):
        problems.append(f"report.policy {report.get('policy')!r} is not trained, zero or random")
    for key in ("return", "length"):
        _check_fields(
            report.get(key), dict.fromkeys(("mean", "std", "min", "max"), float), key, problems
        )
    _check_rate(report.get("success_rate", "missing"), "report.success_rate", problems)
    _check_metrics(report.get("metrics", {}), "report.metrics", problems)
    episodes = report.get("episodes", [])
    if isinstance(episodes, list):
        for i, row in enumerate(episodes):
            _check_fields(row, _EPISODE, f"episodes[{i}]", problems)
        if report.get("num_episodes") != len(episodes):
            problems.append("report.num_episodes differs from the number of episodes listed")
        expected = len(report.get("seeds", [])) * int(report.get("episodes_per_seed", 0))
        if len(episodes) != expected:
            problems.append(
                f"{len(episodes)} episodes listed; seeds x episodes_per_seed = {expected}"
            )
    per_seed = report.get("per_seed", [])
    if isinstance(per_seed, list):
        for i, row in enumerate(per_seed):
            if _check_fields(row, _SEED, f"per_seed[{i}]", problems):
                _check_rate(
                    row.get("success_rate", "missing"), f"per_seed[{i}].success_rate", problems
                )
    reasons = report.get("termination_reasons", {})
    if isinstance(reasons, dict) and not all(
        isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in reasons.items()
    ):
        problems.append("termination_reasons must map reason names to non-negative counts")
    if "alerts" in report:
        _check_alerts(report["alerts"], problems)
    if problems:
        raise EvalSchemaError("eval report does not follow " + SCHEMA + ": " + "; ".join(problems))


def _check_alerts(value: Any, problems: list[str], where: str = "alerts") -> None:
    """The optional `alerts` entry: rates in [0, 1] or null, lead times >= 0 or null,
    counts non-negative with true alerts at most the alerted and the failed episodes; the
    same for every row of its optional `sweep`."""
    if not isinstance(value, dict):
        problems.append(f"report.{where} is {type(value).__name__}, expected an object")
        return
    sweep = value.get("sweep", [])
    if not isinstance(sweep, list):
        problems.append(f"{where}.sweep is {type(sweep).__name__}, expected a list")
    else:
        for i, row in enumerate(sweep):
            _check_alerts(row, problems, f"{where}.sweep[{i}]")
    for key in ("precision", "recall"):
        _check_rate(value.get(key, "missing"), f"{where}.{key}", problems)
    for key in ("mean_lead_s", "median_lead_s"):
        lead = value.get(key, "missing")
        if lead is not None and not (
            isinstance(lead, int | float) and not isinstance(lead, bool) and 0.0 <= lead < math.inf
        ):
            problems.append(f"{where}.{key} must be null or a number >= 0, got {lead!r}")
    counts = {}
    for key in ("alerted_episodes", "failed_episodes", "true_alerts"):
        count = value.get(key)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            problems.append(f"{where}.{key} must be a count >= 0, got {count!r}")
        else:
            counts[key] = count
    if len(counts) == 3 and counts["true_alerts"] > min(
        counts["alerted_episodes"], counts["failed_episodes"]
    ):
        problems.append(f"{where}.true_alerts exceeds the alerted or the failed episodes")
