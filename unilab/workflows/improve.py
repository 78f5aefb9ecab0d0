"""`unilab improve RUN --rounds N --episodes E`: improve a flow VLA from its own rollouts.

Each round is one run directory, made in four steps:

1. **roll out** the current policy (RUN in round 1, then the previous round's run) for E
   episodes, one per env in waves of up to 100 envs, with `unilab play`'s recorder
   (`record=`) into the round's own store
   (`round_<k>/rollouts.zarr`, kept), then append those episodes, with their success as
   metadata, to the loop's store (`unilab.workflows.rollout_store`: fields the demos store
   lacks are left out, its extra columns such as `mode` / `perturbed` get neutral values).
   That store starts as a copy of the demos store the first run trained on (its
   `data.store`), so round k trains on the demos plus the rollouts of rounds 1..k;
2. **train** `algo=awr_flow` on that store from the previous run (`algo.init=`), with
   `algo.iteration = k - 1` (source shares decay and the GAE blend weight grows per round):
   advantages, AWR sampling and RECAP are the learner's (`unilab.algos.awr_flow`);
3. **evaluate** the new run (`unilab.deploy.evaluate.evaluate`: success rate over one
   unbiased episode per env);
4. **report**: a line on stderr and `round.json` in the round's folder (success, rollout
   episodes, store frames by origin and by sampling source, advantage statistics); the whole
   loop in `improve.json` (with the starting run's own evaluation as round 0).

With `takeover_after_s` (`--takeover-after S`) the rollouts are HIL in simulation: the
task's scripted expert takes over every episode still running after S seconds, and with
`takeover_on_error` (`--takeover-on-error`) at the step it sees the policy make a mistake
(`unilab.runtime.takeover`). Its frames are stored as interventions (`is_intervention`:
awr_flow's `human` source, at the fixed demonstration advantage unless the rescue failed)
and the episode as a policy failure. The round
then reports the policy's own success (episodes it finished before any takeover) beside
the rescued share.

Layout under `out` (default `RUN/improve`): `store.zarr`, `round_1/` (`rollouts.zarr` and
`rollouts.json` from play (`rollouts_<w>.json` for later waves of 100 envs),
`runs/<task>/awr_flow/<ts>/` the run, `round.json`), `round_2/`, ..., `improve.json`.
The round's training config is the starting run's saved task, sim, runtime, eval and logging
sections, the network-shaping algo keys (batch size, augmentation, fields, vocabulary), and
the caller's `key=value` overrides (e.g. `algo.steps=500 algo.beta=0.5`), applied every round.

With `repeats` R (`--repeats R`) each round plays E / R scenes R times each (same starts,
other noise seeds). awr_flow's advantage of an episode is then its success minus the mean
of its scene's tries, not of all the task's episodes: a scene the policy always solves or
always fails adds nothing, and where it sometimes succeeds the successful tries are the
better actions for that scene (`unilab.algos.frame_advantages.baseline_groups`). Without
it, a policy's successes are mostly its easy scenes, and copying them did not change how
well it grasps (stop 42).

`episodes=0` is the control: the same rounds of awr_flow on the demonstrations alone (no
rollouts), which shows how much of a round's gain is only more training.

With `inference_settings` (`--inference-settings FILE`, what `unilab tune-inference`
chose) every rollout and every evaluation, the start's included, executes the policy with
those settings (say n_act 2 with ensembling and 2 flow steps). The rollouts then come from
the policy at its tuned best, and each round learns from that better behaviour (expert
iteration with the tuner as the improvement operator); the control takes the same settings
so the two stay comparable.

With `retune` (`--retune ROUNDS`, `unilab.workflows.retune`) the settings follow the
policy: the loop tunes the start (unless `inference_settings` are given) and every new run,
writes the report (`tune_start.json`, `round_<k>/tune.json`), and executes that run's
evaluation and the next round's rollouts with the tuner's recommendation. Settings tuned
for one policy did not suit the next (stop 48); the control with `retune` is "more
imitation, then tune".
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from unilab.algos.awr_flow import INIT_ALGOS
from unilab.config.compose import compose
from unilab.config.errors import ConfigError
from unilab.utils.atomic import atomic_write_text
from unilab.workflows.retune import TUNE_SEED_OFFSET, RetuneBudget, check_retune_space, retune
from unilab.workflows.rollout_store import (
    check_repeats,
    load_with_settings,
    record_rollouts,
    store_frames,
)

SCHEMA = "unilab.improve/1"
STORE_NAME = "store.zarr"
CARRIED_ALGO_KEYS = (
    "batch_size",
    "augment",
    "proprio_field",
    "instruction_field",
    "token_field",
    "tokens",
    "state_field",
    "state_weight",
    "val_fraction",
    "val_every",
    "val_max_frames",
    "vocab_size",
    "pad_id",
)
"""Algo keys of the starting run every round keeps (what shapes the network and its data);
the rest are awr_flow's defaults unless overridden."""
CARRIED_SECTIONS = ("task", "sim", "runtime", "eval", "logging", "data", "run")


def status(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def saved_config(run: Path) -> dict[str, Any]:
    """The saved config of a training run directory, checked to be one improve starts from."""
    run = Path(run)
    if not run.is_dir():
        raise ConfigError(f"{run}: no such run directory (a bc_flow or awr_flow training run)")
    config, checkpoints = run / "config.yaml", run / "checkpoints"
    if not config.is_file() or not checkpoints.is_dir() or not any(checkpoints.glob("*.pt")):
        raise ConfigError(
            f"{run} is not a training run directory: it needs config.yaml and checkpoints/"
            "ckpt_*.pt (what `unilab train` writes)"
        )
    try:
        doc = yaml.safe_load(config.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{config} is not valid YAML: {exc}") from None
    algo = (doc.get("algo") or {}).get("name")
    if algo not in INIT_ALGOS:
        raise ConfigError(
            f"{run} is a {algo!r} run; unilab improve starts from a run of "
            f"{' or '.join(INIT_ALGOS)} (the flow VLA)"
        )
    return dict(doc)


def round_config(
    init: Path, store: Path, iteration: int, runs_dir: Path, overrides: Sequence[str] = ()
) -> Any:
    """The awr_flow config of one round: `init`'s saved sections (see the module doc), the
    loop's store, the round's iteration and output folder, then `overrides`."""
    doc = saved_config(init)
    base: dict[str, Any] = {k: doc[k] for k in CARRIED_SECTIONS if k in doc}
    base["run"] = {k: v for k, v in dict(base.get("run") or {}).items() if k != "resume"}
    algo = dict(doc.get("algo") or {})
    base["algo"] = {k: algo[k] for k in CARRIED_ALGO_KEYS if k in algo}
    tokens = [
        "algo=awr_flow",
        f"algo.init={init}",
        f"algo.iteration={iteration}",
        f"data.store={store}",
        f"run.out_dir={runs_dir}",
        *overrides,
    ]
    return compose(tokens, base=base)


def check_takeover_trigger(
    doc: dict[str, Any], takeover_after_s: float | None, takeover_on_error: bool
) -> None:
    """ConfigError before anything runs when `--takeover-on-error` is the only trigger and
    the run's task has an expert that cannot tell the policy's mistakes."""
    if not takeover_on_error:
        return
    from unilab.runtime.takeover import trigger_problem
    from unilab.tasks.experts import EXPERTS

    name = str((doc.get("task") or {}).get("name", ""))
    if name in EXPERTS.names():
        problem = trigger_problem(EXPERTS.get(name), name, takeover_after_s is not None, True)
        if problem:
            raise ConfigError(f"--takeover-on-error: {problem} (--takeover-after S)")


def advantage_stats(run: Path) -> dict[str, float]:
    """awr_flow's advantage and share statistics, from the run's last metrics row."""
    from unilab.utils.metrics import read_metrics

    path = run / "metrics.jsonl"
    rows = [r for r in read_metrics(path) if "algo/adv_mean" in r] if path.is_file() else []
    if not rows:
        return {}
    last = rows[-1]
    keys = ("adv_mean", "adv_std", "adv_positive", "gae_weight")
    out = {k: float(last[f"algo/{k}"]) for k in keys if f"algo/{k}" in last}
    out.update(
        {k.removeprefix("algo/"): float(v) for k, v in last.items() if k.startswith("algo/share_")}
    )
    return out


def evaluate_run(
    run: Path, episodes: int, seed: int, settings: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    from unilab.deploy.evaluate import evaluate
    from unilab.deploy.sim_task import configs_for_policy

    policy = load_with_settings(run, settings)
    task_cfg, sim_cfg = configs_for_policy(
        policy.metadata.task_config, policy.metadata.sim_config, []
    )
    report = evaluate(policy, task_cfg, sim_cfg, episodes=episodes, seeds=[seed])
    return {
        "success_rate": report["success_rate"],
        "return_mean": report["return"]["mean"],
        "episodes": report["num_episodes"],
        "seed": seed,
        "execution": report.get("execution"),
    }


def format_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def taken_note(rollouts: dict[str, Any]) -> str:
    """', N taken over (M rescued)' for rollouts with takeovers, ', S scenes x R tries (M
    with both outcomes)' for repeated scenes; '' for neither."""
    taken = rollouts.get("takeover")
    note = f", {taken['episodes']} taken over ({taken['rescued']} rescued)" if taken else ""
    if "scenes" in rollouts:
        note += (
            f", {rollouts['scenes']} scenes x {rollouts['repeats']} tries "
            f"({rollouts['mixed_scenes']} with both outcomes)"
        )
    return note


def improve(
    run: str | Path,
    *,
    rounds: int,
    episodes: int,
    out: str | Path | None = None,
    eval_episodes: int | None = None,
    eval_seed: int = 12345,
    seed: int = 0,
    overrides: Sequence[str] = (),
    takeover_after_s: float | None = None,
    takeover_on_error: bool = False,
    repeats: int = 1,
    inference_settings: Mapping[str, Any] | None = None,
    retune_budget: RetuneBudget | None = None,
    log: Callable[[str], None] = status,
) -> dict[str, Any]:
    """Run `rounds` improvement rounds from `run` (see the module doc); returns the report
    written to `out/improve.json`. `eval_episodes` defaults to `episodes` (20 when that is
    0); rollouts of round k use seed `seed + 1000 k`, evaluation `eval_seed` every round
    (comparable); `takeover_after_s`, `takeover_on_error`: expert takeovers in the rollouts
    (see the module doc); `repeats`: tries per scene (see `record_rollouts`);
    `inference_settings`: how every rollout and evaluation executes; `retune_budget`:
    re-tune them for every run (see the module doc)."""
    if rounds < 1:
        raise ConfigError(f"--rounds={rounds} must be at least 1")
    if episodes < 0:
        raise ConfigError(f"--episodes={episodes} must be >= 0 (0: the demonstrations alone)")
    check_takeover_trigger(saved_config(Path(run)), takeover_after_s, takeover_on_error)
    if episodes == 0 and (takeover_after_s is not None or takeover_on_error):
        raise ConfigError(
            "--takeover-after / --takeover-on-error need rollouts to take over: --episodes >= 1"
        )
    check_repeats(episodes, repeats)
    eval_episodes = (episodes or 20) if eval_episodes is None else eval_episodes
    if eval_episodes < 1:
        raise ConfigError(f"--eval-episodes={eval_episodes} must be at least 1")
    start = Path(run)
    doc = saved_config(start)
    demos = (doc.get("data") or {}).get("store")
    if not demos or not Path(demos).exists():
        raise ConfigError(
            f"{start}: its data.store ({demos!r}) is not an episode store here; improve "
            "starts its store from the demos the run trained on"
        )
    settings = dict(inference_settings or {})
    if settings:  # unusable settings fail here, before any output
        load_with_settings(start, settings)
    if retune_budget is not None:
        check_retune_space(start, retune_budget)
    out_dir = Path(out) if out is not None else start / "improve"
    if (out_dir / "improve.json").exists() or (out_dir / STORE_NAME).exists():
        raise ConfigError(
            f"{out_dir} already holds an improvement loop; pass --out to start another"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    store = out_dir / STORE_NAME
    log(f"improve: copying the demos store {demos} to {store}")
    shutil.copytree(demos, store)

    t_start = time.perf_counter()
    start_tune = None
    if retune_budget is not None and not settings:
        start_tune = retune(
            start, out_dir / "tune_start.json", retune_budget, seed + TUNE_SEED_OFFSET, log
        )
        settings = dict(start_tune["recommended"])
    log(f"improve: evaluating the starting run {start} ({eval_episodes} episodes)")
    baseline = evaluate_run(start, eval_episodes, eval_seed, settings)
    log(f"round 0 (start): eval success {format_rate(baseline['success_rate'])}")
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "start": str(start),
        "store": str(store),
        "demos": str(demos),
        "takeover_after_s": takeover_after_s,
        "takeover_on_error": takeover_on_error,
        "repeats": repeats,
        "inference_settings": settings,
        "retune": None if retune_budget is None else retune_budget.to_dict(),
        "baseline": {"run": str(start), "eval": baseline, "tune": start_tune},
        "rounds": [],
    }
    atomic_write_text(out_dir / "improve.json", json.dumps(report, indent=2) + "\n")
    current = start
    for k in range(1, rounds + 1):
        t0 = time.perf_counter()
        folder = out_dir / f"round_{k}"
        if episodes:
            log(f"round {k}/{rounds}: rolling out {episodes} episodes of {current}")
            rollouts = record_rollouts(
                current,
                store,
                folder,
                episodes,
                seed + 1000 * k,
                takeover_after_s,
                takeover_on_error,
                repeats,
                settings,
            )
            rollouts["inference_settings"] = dict(settings)
        else:  # the control: what the same training does on the demonstrations alone
            rollouts = {"episodes": 0, "recorded_episodes": 0, "success_rate": None}
        frames = store_frames(store)
        log(
            f"round {k}/{rounds}: training awr_flow on {frames['total']} frames "
            f"({frames['by_source']}) from {current}"
        )
        cfg = round_config(current, store, k - 1, folder / "runs", overrides)
        from unilab.workflows.train import train

        try:
            result = train(cfg)
        except SystemExit as exc:  # the run ended with problems (printed by the run)
            raise SystemExit(
                f"improve: round {k}'s training ended with problems (exit {exc.code}, see "
                f"above); the loop stops. {out_dir / 'improve.json'} holds the {k - 1} finished "
                f"round(s); "
                f"the round's run is under {folder / 'runs'}"
            ) from None
        if result is None:  # only on a follower rank under torchrun; not a case here
            raise ConfigError("unilab improve trains in one process")
        trained = result.path
        tuned = None
        if retune_budget is not None:
            tune_seed = seed + 1000 * k + TUNE_SEED_OFFSET
            tuned = retune(trained, folder / "tune.json", retune_budget, tune_seed, log)
            settings = dict(tuned["recommended"])
        log(f"round {k}/{rounds}: evaluating {trained} ({eval_episodes} episodes)")
        evaluation = evaluate_run(trained, eval_episodes, eval_seed, settings)
        stats = advantage_stats(trained)
        summary: dict[str, Any] = {
            "round": k,
            "init": str(current),
            "run": str(trained),
            "iteration": k - 1,
            "eval": evaluation,
            "inference_settings": dict(settings),
            "tune": tuned,
            "rollouts": rollouts,
            "store_frames": frames,
            "advantages": stats,
            "wall_s": time.perf_counter() - t0,
        }
        atomic_write_text(folder / "round.json", json.dumps(summary, indent=2) + "\n")
        report["rounds"].append(summary)
        report["wall_s"] = time.perf_counter() - t_start
        atomic_write_text(out_dir / "improve.json", json.dumps(report, indent=2) + "\n")
        log(
            f"round {k}/{rounds}: eval success {format_rate(evaluation['success_rate'])} "
            f"(start {format_rate(baseline['success_rate'])}); rollouts {rollouts['episodes']} "
            f"episodes, success {format_rate(rollouts['success_rate'])}{taken_note(rollouts)}; "
            f"store {frames['total']} "
            f"frames by source {frames['by_source']}; advantage mean {stats.get('adv_mean', 0.0):+.3f}, "
            f"{100 * stats.get('adv_positive', 0.0):.0f} % positive, GAE weight "
            f"{stats.get('gae_weight', 0.0):.2f}; {summary['wall_s']:.0f} s"
        )
        current = trained
    log(f"improve: {rounds} round(s) in {time.perf_counter() - t_start:.0f} s; {out_dir}")
    return report
