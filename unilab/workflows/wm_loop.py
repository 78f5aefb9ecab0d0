"""`unilab wm loop POLICY --world-model WM`: improve a flow VLA from real rollouts plus
synthetic ones from a world model that is fine-tuned on the real ones (VLAW-style).

Each round is one folder, made in five steps:

1. **roll out** the current policy (POLICY in round 1, then the previous round's run) for
   E episodes in the simulator with `unilab improve`'s recorder path
   (`unilab.workflows.improve`: `round_<k>/rollouts.zarr`, appended with their success to
   the loop's real store `real.zarr`, which starts as a copy of POLICY's demos store);
2. **fine-tune the world model** on the real store: `algo=world_model` with `algo.init` the
   previous round's model (WM in round 1), its saved model settings, `--wm-steps` steps
   (`round_<k>/wm/<task>/world_model/<ts>/`);
3. **generate** `--synthetic` rollouts of the current policy inside the fine-tuned model
   from start frames of the real store (`unilab.worldmodel.generate`, consistency filter
   included) into `round_<k>/synthetic.zarr` (origin `wm`);
4. **train** `algo=awr_flow` from the current policy on `round_<k>/train.zarr` (the real
   store plus this round's synthetic episodes that the model calls successes: filtered
   imitation of the model's successes, as VLAW trains on the rollouts its reward model
   accepts; `synthetic_keep="all"` adds the failures too) with `algo.iteration = k - 1`.
   The synthetic share of every batch is their share of the frames, capped at
   `--wm-share` (a synthetic frame never weighs more than a real one, and a handful of
   synthetic episodes is not replayed in a quarter of every batch), and pinned: the real
   sources (expert demos, sim rollouts) get the shares awr_flow's schedule gives them at
   that iteration, scaled to the rest (`capped_shares`; `algo.share_decay=1` so the
   learner keeps them);
5. **evaluate** the new run in the simulator (the same seed every round) and write
   `round_<k>/round.json`; the whole loop in `wm_loop.json` (round 0: the start's eval).

Synthetic episodes never enter the real store: the world model learns from the simulator
only, and each round's policy sees only the synthetic episodes of its own round.

`synthetic=0` is the control arm ("real only"): steps 2 and 3 are skipped and no world
model is needed, so the same real rollouts, training and evaluation run without synthetic
data (`unilab bench wm_gain` compares the two arms).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from unilab.algos.awr_sampling import AWRSampler
from unilab.config.compose import compose
from unilab.config.errors import ConfigError
from unilab.utils.atomic import atomic_write_text
from unilab.workflows.improve import (
    CARRIED_SECTIONS,
    advantage_stats,
    evaluate_run,
    format_rate,
    round_config,
    saved_config,
    status,
)
from unilab.workflows.rollout_store import append_episodes, record_rollouts, store_frames

SCHEMA = "unilab.wm_loop/1"
REAL_STORE = "real.zarr"
WM_DEFAULTS = ("eval.every=0", "viz.rerun=false", "run.export=false")


def world_model_config(
    init: Path, store: Path, runs_dir: Path, steps: int, overrides: Sequence[str] = ()
) -> Any:
    """The fine-tuning config of one round: `init`'s saved config (model settings, task,
    sim, runtime), `algo.init=init`, the loop's store and folder, `steps`, then `overrides`."""
    config = Path(init) / "config.yaml"
    if not config.is_file():
        raise ConfigError(f"{init} is not a world-model run directory (no config.yaml)")
    doc = yaml.safe_load(config.read_text()) or {}
    algo = dict(doc.get("algo") or {})
    if algo.get("name") != "world_model":
        raise ConfigError(f"{init} is a {algo.get('name')!r} run, not algo=world_model")
    if int(algo.get("horizon", 8)) != 1:
        raise ConfigError(
            f"{init} steps {algo.get('horizon')} actions at a time; the loop generates one "
            "frame per control step: start from a model trained with algo.horizon=1"
        )
    base: dict[str, Any] = {k: doc[k] for k in CARRIED_SECTIONS if k in doc}
    base["run"] = {k: v for k, v in dict(base.get("run") or {}).items() if k != "resume"}
    base["algo"] = {k: v for k, v in algo.items() if k not in ("name", "init", "steps")}
    tokens = [
        "algo=world_model",
        *WM_DEFAULTS,
        f"algo.init={init}",
        f"algo.steps={steps}",
        f"data.store={store}",
        f"run.out_dir={runs_dir}",
        "run.quiet=true",
        *overrides,
    ]
    return compose(tokens, base=base)


def capped_shares(
    algo: Any, present: Sequence[str], iteration: int, wm_share: float
) -> dict[str, float]:
    """Batch shares per present source: the real ones as awr_flow's schedule has them after
    `iteration` decays (their `shares`, `floors`, `share_decay`), scaled to 1 - wm_share;
    `wm` (when present) exactly `wm_share`. Sum 1."""
    if not 0.0 <= wm_share < 1.0:
        raise ConfigError(f"--wm-share={wm_share} must be in [0, 1)")
    real = [s for s in present if s != "wm"]
    if not real:
        raise ConfigError("the training store holds no real (non-wm) frames")
    starts = {s: float(algo.shares[s]) for s in real}
    total = sum(starts.values())
    if total <= 0:
        raise ConfigError(f"algo.shares of the real sources {real} sum to 0")
    floors = {s: min(float(algo.floors.get(s, 0.0)), starts[s] / total) for s in real}
    sampler = AWRSampler(
        {s: np.zeros(1) for s in real}, 1.0, starts, floors, decay=float(algo.share_decay)
    )
    for _ in range(iteration):
        sampler.step()
    synthetic = wm_share if "wm" in present else 0.0
    out = {s: v * (1.0 - synthetic) for s, v in sampler.shares.items()}
    if "wm" in present:
        out["wm"] = synthetic
    return out


def policy_config(
    init: Path,
    store: Path,
    iteration: int,
    runs_dir: Path,
    present: Sequence[str],
    wm_share: float,
    overrides: Sequence[str] = (),
) -> tuple[Any, dict[str, float]]:
    """improve's round config (`round_config`) with the shares pinned (`capped_shares`)."""
    cfg = round_config(init, store, iteration, runs_dir, overrides)
    shares = capped_shares(cfg.algo, present, iteration, wm_share)
    pinned = [f"algo.shares.{s}={v!r}" for s, v in shares.items()] + ["algo.share_decay=1.0"]
    return round_config(init, store, iteration, runs_dir, [*overrides, *pinned]), shares


def _validation(run: Path) -> dict[str, float]:
    path = run / "summary.json"
    if not path.is_file():
        return {}
    val: Mapping[str, Any] = json.loads(path.read_text()).get("validation") or {}
    return {k: float(v) for k, v in val.items() if isinstance(v, int | float)}


def wm_loop(
    run: str | Path,
    world_model: str | Path | None,
    *,
    rounds: int,
    episodes: int,
    synthetic: int,
    max_steps: int = 200,
    wm_steps: int = 500,
    wm_share: float = 0.25,
    max_drift: float | None = None,
    synthetic_keep: str = "success",
    filter: str = "reencode",
    out: str | Path | None = None,
    eval_episodes: int | None = None,
    eval_seed: int = 12345,
    seed: int = 0,
    overrides: Sequence[str] = (),
    wm_overrides: Sequence[str] = (),
    log: Callable[[str], None] = status,
) -> dict[str, Any]:
    """Run `rounds` rounds from policy `run` and world model `world_model` (module doc);
    returns the report written to `out/wm_loop.json` (default `run/wm_loop`). Rollouts and
    generation of round k use seed `seed + 1000 k`; evaluation `eval_seed` every round.
    `synthetic=0` runs the real-only control arm (`world_model` unused, may be None)."""
    from unilab.workflows.train import train
    from unilab.worldmodel.fidelity import WorldModelRunError, load_world_model
    from unilab.worldmodel.generate import generate
    from unilab.worldmodel.state_rule import task_state_rule

    for flag, value in (
        ("--rounds", rounds),
        ("--episodes", episodes),
        ("--max-steps", max_steps),
        ("--wm-steps", wm_steps),
    ):
        if value < 1:
            raise ConfigError(f"{flag}={value} must be at least 1")
    if synthetic < 0:
        raise ConfigError(f"--synthetic={synthetic} must be at least 0 (0: real rollouts only)")
    if synthetic_keep not in ("success", "all"):
        raise ConfigError(f"synthetic_keep={synthetic_keep!r}: use 'success' or 'all'")
    if synthetic and world_model is None:
        raise ConfigError("--synthetic > 0 needs a world model (--world-model RUN)")
    if filter not in ("reencode", "state", "none"):
        raise ConfigError(
            f"--filter {filter}: the loop fine-tunes one world model, so it filters with "
            "reencode, state or none (an ensemble is for unilab wm generate)"
        )
    eval_episodes = episodes if eval_episodes is None else eval_episodes
    if eval_episodes < 1:
        raise ConfigError(f"--eval-episodes={eval_episodes} must be at least 1")
    if not 0.0 <= wm_share < 1.0:
        raise ConfigError(f"--wm-share={wm_share} must be in [0, 1)")
    start = Path(run)
    wm_start = Path(world_model) if synthetic and world_model is not None else None
    doc = saved_config(start)
    demos = (doc.get("data") or {}).get("store")
    if not demos or not Path(demos).exists():
        raise ConfigError(
            f"{start}: its data.store ({demos!r}) is not an episode store here; the loop "
            "starts its real store from the demos the policy trained on"
        )
    rule = None
    if wm_start is not None:
        try:
            model = load_world_model(wm_start).model
            rule = task_state_rule(wm_start) if filter == "state" else None
        except WorldModelRunError as exc:
            raise ConfigError(str(exc)) from None
        if model.horizon != 1:
            raise ConfigError(
                f"{wm_start} steps {model.horizon} actions at a time; the loop generates one "
                "frame per control step: start from a world model trained with algo.horizon=1"
            )
    out_dir = Path(out) if out is not None else start / "wm_loop"
    if (out_dir / "wm_loop.json").exists() or (out_dir / REAL_STORE).exists():
        raise ConfigError(f"{out_dir} already holds a world-model loop; pass --out for another")
    out_dir.mkdir(parents=True, exist_ok=True)
    real = out_dir / REAL_STORE
    log(f"wm loop: copying the demos store {demos} to {real}")
    shutil.copytree(demos, real)

    t_start = time.perf_counter()
    log(f"wm loop: evaluating the starting policy {start} ({eval_episodes} episodes)")
    baseline = evaluate_run(start, eval_episodes, eval_seed)
    log(f"round 0 (start): eval success {format_rate(baseline['success_rate'])}")
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "start": str(start),
        "world_model": None if wm_start is None else str(wm_start),
        "synthetic_per_round": synthetic,
        "real_store": str(real),
        "demos": str(demos),
        "wm_share_cap": wm_share,
        "synthetic_keep": synthetic_keep,
        "filter": filter,
        "baseline": {"run": str(start), "eval": baseline},
        "rounds": [],
    }
    atomic_write_text(out_dir / "wm_loop.json", json.dumps(report, indent=2) + "\n")
    policy, wm = start, wm_start
    for k in range(1, rounds + 1):
        t0 = time.perf_counter()
        folder = out_dir / f"round_{k}"
        round_seed = seed + 1000 * k
        log(f"round {k}/{rounds}: rolling out {episodes} episodes of {policy} in the simulator")
        rollouts = record_rollouts(policy, real, folder, episodes, round_seed)

        train_store = folder / "train.zarr"
        shutil.copytree(real, train_store)
        world: dict[str, Any] | None = None
        made: dict[str, Any] | None = None
        if wm is not None:
            log(f"round {k}/{rounds}: fine-tuning the world model {wm} ({wm_steps} steps)")
            wm_result = train(world_model_config(wm, real, folder / "wm", wm_steps, wm_overrides))
            if wm_result is None:
                raise ConfigError("unilab wm loop trains in one process")
            wm_run = wm_result.path
            log(f"round {k}/{rounds}: generating {synthetic} synthetic episodes in {wm_run}")
            synthetic_store = folder / "synthetic.zarr"
            try:
                generated = generate(
                    load_world_model(wm_run),
                    policy,
                    real,
                    synthetic_store,
                    episodes=synthetic,
                    max_steps=max_steps,
                    seed=round_seed,
                    max_drift=max_drift,
                    wm_run=str(wm_run),
                    filter=filter,
                    state_rule=rule,
                )
            except WorldModelRunError as exc:
                raise ConfigError(str(exc)) from None
            wanted = (lambda meta: bool(meta.success)) if synthetic_keep == "success" else None
            added = append_episodes(synthetic_store, train_store, wanted)
            world = {
                "init": str(wm),
                "run": str(wm_run),
                "steps": wm_steps,
                "validation": _validation(wm_run),
            }
            made = {
                **generated.to_dict(),
                "store": str(synthetic_store),
                "appended_episodes": added,
                "keep": synthetic_keep,
            }
            wm = wm_run
        frames = store_frames(train_store)
        share = min(wm_share, frames["by_source"].get("wm", 0) / max(frames["total"], 1))
        cfg, shares = policy_config(
            policy, train_store, k - 1, folder / "runs", list(frames["by_source"]), share, overrides
        )
        log(
            f"round {k}/{rounds}: training awr_flow on {frames['total']} frames "
            f"({frames['by_source']}), shares {', '.join(f'{s} {v:.2f}' for s, v in shares.items())}"
        )
        result = train(cfg)
        if result is None:
            raise ConfigError("unilab wm loop trains in one process")
        trained = result.path
        log(f"round {k}/{rounds}: evaluating {trained} ({eval_episodes} episodes)")
        evaluation = evaluate_run(trained, eval_episodes, eval_seed)
        summary: dict[str, Any] = {
            "round": k,
            "init": str(policy),
            "run": str(trained),
            "iteration": k - 1,
            "eval": evaluation,
            "rollouts": rollouts,
            "world_model": world,
            "synthetic": made,
            "shares": shares,
            "store_frames": frames,
            "advantages": advantage_stats(trained),
            "wall_s": time.perf_counter() - t0,
        }
        atomic_write_text(folder / "round.json", json.dumps(summary, indent=2) + "\n")
        report["rounds"].append(summary)
        report["wall_s"] = time.perf_counter() - t_start
        atomic_write_text(out_dir / "wm_loop.json", json.dumps(report, indent=2) + "\n")
        kept = (
            "no synthetic (real only)"
            if made is None
            else f"synthetic kept {made['kept']} of {made['generated']} (predicted success "
            f"{made['predicted_success']:.2f})"
        )
        log(
            f"round {k}/{rounds}: eval success {format_rate(evaluation['success_rate'])} (start "
            f"{format_rate(baseline['success_rate'])}); real rollouts {rollouts['episodes']} "
            f"(success {format_rate(rollouts['success_rate'])}); {kept}; "
            f"{summary['wall_s']:.0f} s"
        )
        policy = trained
    log(f"wm loop: {rounds} round(s) in {time.perf_counter() - t_start:.0f} s; {out_dir}")
    return report
