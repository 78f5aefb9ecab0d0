"""`unilab bench wm_filter`: do the filters of `unilab wm generate` (the re-encoded second
path, an ensemble's disagreement) remove the rollouts whose predicted outcome the simulator
contradicts? And how fast is generation against the simulator with its cameras?

    unilab bench wm_filter --task arm_move_side --demos 40 --failures 40 --wm-steps 1500 \\
        --vla-steps 300 --rollouts 48 --max-steps 120 --ensemble 2 [key=value ...]

1. Episodes with per-episode seeds (every start state replays from its seed): `--demos`
   solved episodes of the scripted expert, `--failures` episodes of the expert with a
   constant per-episode offset on its motion axes (std drawn in [0, 0.3]: mostly failures,
   some successes; executed actions recorded), and a held-out store of the same mixture
   for start states.
2. A one-step world model (`algo.horizon=1`) trains on demos + failures, and `--ensemble`
   more with seeds seed+1.. (same store, steps and overrides); a small bc_flow VLA on the
   demos.
3. `rollout_in_model` (filter `both`): the VLA rolled out inside the model from held-out
   start frames; the re-encoded path and every member's verdict on every rollout.
4. The same action sequences are replayed open loop in the simulator from the same start
   states (reset with the start episode's seed) for the model episode's length: the truth.
   A rollout is *bad* when the model's predicted success differs from the simulator's.
   Precision = bad among those the filter removed; recall = removed among the bad; also per
   drift bound (the outcome check kept) and each check alone; for the ensemble: any member
   disagreeing (the shipped `--filter ensemble`), at least k of them, each member alone,
   both filters, and a sweep over |members' mean P(success) - the main path's verdict|;
   the ROC AUC of the continuous scores (0.5: no better than chance).
5. Throughput on the same batch: generated frames/s (model step + decode, no policy; the
   whole generator with the policy and each filter's extra paths) against simulated and
   rendered frames/s (the task stepping its envs with its cameras).

Writes JSON (`rows`: one per filter setting and throughput measure; `ratios`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.bench.common import machine_info, write_json
from unilab.bench.wm_episodes import (
    MAX_OFFSET,
    TASK_OVERRIDES,
    VLA_OVERRIDES,
    WM_OVERRIDES,
    filter_quality,
    kept_over_all,
    record_episodes,
    replay_in_sim,
    roc_auc,
    task_env,
    train_run,
)
from unilab.data import EpisodeStore
from unilab.worldmodel.consistency import consistency, ensemble_disagrees, state_disagrees
from unilab.worldmodel.fidelity import LoadedWorldModel, load_world_model
from unilab.worldmodel.generate import ModelRollouts, rollout_in_model
from unilab.worldmodel.state_rule import task_state_rule

DEFAULT_OUT = "bench/results/wm_filter.json"


@torch.no_grad()
def model_frames_per_s(loaded: LoadedWorldModel, batch: int, steps: int) -> float:
    """Model step + decode (the generator's per-frame work, no policy), one batch."""
    m = loaded.model
    z = torch.randn(batch, len(m.cameras), m.latent)
    p = torch.zeros(batch, m.proprio_dim)
    pad = torch.zeros(batch, m.horizon, dtype=torch.bool)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    for _ in range(steps):
        action = torch.randn(batch, m.horizon, m.action_dim, generator=gen).clamp(-1, 1)
        z, p, *_ = m.predict(z, p, action, pad)
        (m.decode(z).clamp(0, 1) * 255).round().to(torch.uint8)
    return batch * steps / (time.perf_counter() - t0)


def sim_frames_per_s(task: str, overrides: Sequence[str], batch: int, steps: int) -> float:
    """The task stepping `batch` envs with its cameras (each step renders the frames)."""
    env = task_env(task, overrides, batch, 0)
    env.reset()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (steps, batch, env.action_dim)).astype(np.float32)
    t0 = time.perf_counter()
    for a in actions:
        env.step(a)
    seconds = time.perf_counter() - t0
    env.close()
    return batch * steps / seconds


def _outcome_agreement(ro: ModelRollouts, sim_success: np.ndarray) -> dict[str, Any]:
    pred = ro.predicted_success
    return {
        "predicted_success": float(pred.mean()),
        "sim_success": float(sim_success.mean()),
        "agreement": float((pred == sim_success).mean()),
        "model_ended": float((ro.outcome > 0).mean()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench wm_filter", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--task", default="arm_move_side")
    parser.add_argument("--demos", type=int, default=40, help="solved expert episodes")
    parser.add_argument("--failures", type=int, default=40, help="offset-expert episodes")
    parser.add_argument("--starts", type=int, default=24, help="held-out start episodes")
    parser.add_argument("--wm-steps", type=int, default=3000)
    parser.add_argument("--vla-steps", type=int, default=1500)
    parser.add_argument("--rollouts", type=int, default=64, help="policy rollouts in the model")
    parser.add_argument("--max-steps", type=int, default=150)
    parser.add_argument("--max-drift", type=float, default=None, help="default: no drift bound")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--ensemble",
        type=int,
        default=2,
        help="extra world models (seeds seed+1..seed+N) for the ensemble filter (0: none)",
    )
    parser.add_argument(
        "--state-policy",
        action="store_true",
        help="world models and VLA read the critic state too (task.state_policy=true), which "
        "adds the task-rule filter (--filter state)",
    )
    parser.add_argument("--out", default="", help=f"default {DEFAULT_OUT} (_state: --state-policy)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument(
        "overrides", nargs="*", help="world-model overrides, e.g. algo.latent_dim=32"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.demos, args.failures, args.starts, args.wm_steps, args.vla_steps = 4, 4, 4, 20, 4
        args.rollouts, args.max_steps = 6, 20
    if not args.out:
        args.out = DEFAULT_OUT.replace(".json", "_state.json") if args.state_policy else DEFAULT_OUT
    scene = [*TASK_OVERRIDES, *(["task.state_policy=true"] if args.state_policy else [])]
    torch.set_num_threads(1)
    machine, started = machine_info(), time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="wm_filter_"))
    task = args.task
    train_store, start_store = work / "train.zarr", work / "starts.zarr"
    t0 = time.perf_counter()
    data = {
        "demos": record_episodes(
            train_store, task, range(args.demos), overrides=scene, solved_only=True
        ),
        "failures": record_episodes(
            train_store,
            task,
            range(10_000, 10_000 + args.failures),
            overrides=scene,
            max_offset=MAX_OFFSET,
        ),
        "starts": record_episodes(
            start_store,
            task,
            range(20_000, 20_000 + args.starts),
            overrides=scene,
            max_offset=MAX_OFFSET,
        ),
    }
    print(f"episodes recorded in {time.perf_counter() - t0:.0f} s: {data}")
    t0 = time.perf_counter()
    wm_tokens = ["algo=world_model", "algo.horizon=1", f"algo.steps={args.wm_steps}"]
    wm_run = train_run(
        task,
        [*scene, *wm_tokens, *WM_OVERRIDES, f"data.store={train_store}", *args.overrides],
        work / "wm",
        args.seed,
    )
    wm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    member_runs = [
        train_run(
            task,
            [
                *scene,
                *wm_tokens,
                *WM_OVERRIDES,
                f"data.store={train_store}",
                *args.overrides,
            ],
            work / f"wm_member{k}",
            args.seed + k,
        )
        for k in range(1, args.ensemble + 1)
    ]
    members_s = time.perf_counter() - t0
    demos_store = work / "demos.zarr"
    record_episodes(demos_store, task, range(args.demos), overrides=scene, solved_only=True)
    t0 = time.perf_counter()
    vla_run = train_run(
        task,
        [
            *scene,
            "algo=bc_flow",
            f"algo.steps={args.vla_steps}",
            f"algo.val_every={max(1, args.vla_steps)}",
            *VLA_OVERRIDES,
            f"data.store={demos_store}",
        ],
        work / "vla",
        args.seed,
    )
    vla_s = time.perf_counter() - t0
    print(
        f"world model {wm_s:.0f} s, {args.ensemble} ensemble members {members_s:.0f} s, "
        f"VLA {vla_s:.0f} s"
    )

    loaded = load_world_model(wm_run)
    members = [load_world_model(r) for r in member_runs]
    rule = task_state_rule(wm_run) if args.state_policy else None

    def rollouts(mode: str, ensemble: Sequence[LoadedWorldModel]) -> ModelRollouts:
        ro, _ = rollout_in_model(
            loaded,
            vla_run,
            start_store,
            episodes=args.rollouts,
            max_steps=args.max_steps,
            seed=args.seed,
            max_drift=args.max_drift,
            ensemble=ensemble,
            filter=mode,
            state_rule=rule,
        )
        return ro

    ro = rollouts("both" if members else "reencode", members)
    generated = int(ro.length.sum())
    n_members = len(members)

    def gen_fps(r: ModelRollouts) -> float:
        return args.rollouts * r.rows["action"].shape[1] / r.seconds

    # the generator's cost per filter (same rollouts: the heads do not steer the policy)
    timed = {"both": ro, "reencode": rollouts("reencode", [])}
    timed["none"] = rollouts("none", [])
    if members:
        timed["ensemble"] = rollouts("ensemble", members)
        assert (timed["ensemble"].outcome_members == ro.outcome_members).all()
    for other in timed.values():
        assert (other.outcome == ro.outcome).all() and (other.length == ro.length).all()
    seeds = [int(ro.metas[e].seed or 0) for e in range(args.rollouts)]
    with EpisodeStore.open(start_store, "r") as st:
        stored = np.stack([st.episode(int(i), ["obs/policy"])["obs/policy"][0] for i in ro.picks])
    sim_success, start_proprio = replay_in_sim(task, seeds, ro.rows["action"], ro.length, scene)
    start_match = float(np.isclose(start_proprio, stored, atol=1e-5).all(1).mean())
    bad = ro.predicted_success != sim_success
    rows: list[dict[str, Any]] = []
    keep_reencode, _ = consistency(ro.outcome, ro.outcome_reencoded, ro.drift, args.max_drift)
    quality = filter_quality(~keep_reencode, bad)
    state_quality: dict[str, Any] = {}
    if ro.state_success is not None:
        state_off = state_disagrees(ro.outcome, ro.state_success)
        state_quality = filter_quality(state_off, bad)
        rows.append(
            {
                "kind": "filter",
                "setting": "state: task rule vs success head",
                **filter_quality(state_off, bad),
            }
        )
    shipped = "outcome" if args.max_drift is None else f"outcome+drift<={args.max_drift}"
    rows.append({"kind": "filter", "setting": f"reencode as shipped: {shipped}", **quality})
    outcome_only = ro.outcome != ro.outcome_reencoded
    rows.append({"kind": "filter", "setting": "outcome only", **filter_quality(outcome_only, bad)})
    # fixed bounds, and the drift's own deciles (the useful range depends on the model)
    deciles = np.quantile(ro.drift, np.linspace(0.1, 0.9, 9)).round(3).tolist()
    for bound in sorted({0.1, 0.25, 0.5, 1.0, 2.0, 4.0, *deciles}):
        keep, _ = consistency(ro.outcome, ro.outcome_reencoded, ro.drift, bound)
        rows.append(
            {"kind": "filter", "setting": f"outcome+drift<={bound}", **filter_quality(~keep, bad)}
        )
        rows.append(
            {
                "kind": "filter",
                "setting": f"drift<={bound} only",
                **filter_quality(ro.drift > bound, bad),
            }
        )

    ens_quality: dict[str, Any] = {}
    score = np.abs(ro.success_members_mean - ro.predicted_success)
    if members:
        disagree = ensemble_disagrees(ro.outcome, ro.outcome_members)
        ens_quality = filter_quality(disagree, bad)
        for k in range(1, n_members + 1):
            name = "any member" if k == 1 else f">={k} of {n_members} members"
            rows.append(
                {
                    "kind": "filter",
                    "setting": f"ensemble: {name} disagree(s)",
                    **filter_quality(ensemble_disagrees(ro.outcome, ro.outcome_members, k), bad),
                }
            )
        for k in range(2, n_members):  # the ensembles of fewer members (the same seeds)
            first = ensemble_disagrees(ro.outcome, ro.outcome_members[:k])
            rows.append(
                {
                    "kind": "filter",
                    "setting": f"ensemble of members 1..{k}: any disagrees",
                    **filter_quality(first, bad),
                }
            )
        for i in range(n_members):
            alone = ro.outcome_members[i] != ro.outcome
            rows.append(
                {
                    "kind": "filter",
                    "setting": f"ensemble: member {i + 1} alone",
                    **filter_quality(alone, bad),
                }
            )
        rows.append(
            {
                "kind": "filter",
                "setting": f"both: reencode ({shipped}) or ensemble",
                **filter_quality(~ro.keep, bad),
            }
        )
        either = disagree | (ro.outcome != ro.outcome_reencoded)
        rows.append(
            {"kind": "filter", "setting": "ensemble or outcome", **filter_quality(either, bad)}
        )
        for bound in np.round(np.arange(0.1, 0.95, 0.1), 1).tolist():
            rows.append(
                {
                    "kind": "filter",
                    "setting": f"|members' P(success) - main verdict| > {bound}",
                    **filter_quality(score > bound, bad),
                }
            )

    batch = args.rollouts
    steps = min(100, args.max_steps)
    model_fps = model_frames_per_s(loaded, batch, steps)
    sim_fps = sim_frames_per_s(task, TASK_OVERRIDES, batch, steps)
    rows += [
        {
            "kind": "throughput",
            "setting": f"world model step+decode, batch {batch}",
            "frames_per_s": model_fps,
        },
        *(
            {
                "kind": "throughput",
                "setting": f"generator, filter {mode} ({what}), batch {batch}",
                "frames_per_s": gen_fps(timed[mode]),
            }
            for mode, what in (
                ("none", "policy + model"),
                ("reencode", "+ the re-encoded path"),
                ("ensemble", f"+ {n_members} members"),
                ("both", f"+ the re-encoded path and {n_members} members"),
            )
            if mode in timed
        ),
        {
            "kind": "throughput",
            "setting": f"simulator + camera render, {batch} envs",
            "frames_per_s": sim_fps,
        },
    ]
    ratios = {
        "filter_precision": quality["precision"],
        "filter_recall": quality["recall"],
        "bad_rate_kept_over_all": kept_over_all(quality),
        "ensemble_precision": ens_quality.get("precision"),
        "ensemble_recall": ens_quality.get("recall"),
        "ensemble_bad_rate_kept": ens_quality.get("bad_rate_kept"),
        "ensemble_bad_rate_all": ens_quality.get("bad_rate_all"),
        "ensemble_bad_rate_kept_over_all": kept_over_all(ens_quality) if members else None,
        "state_precision": state_quality.get("precision"),
        "state_recall": state_quality.get("recall"),
        "state_bad_rate_kept_over_all": kept_over_all(state_quality) if state_quality else None,
        "auc_drift": roc_auc(ro.drift, bad),
        "auc_ensemble_score": roc_auc(score, bad) if members else None,
        "auc_members_disagreeing": (
            roc_auc((ro.outcome_members != ro.outcome).sum(0).astype(float), bad)
            if members
            else None
        ),
        "model_over_sim_frames_per_s": model_fps / sim_fps,
        "generator_over_sim_frames_per_s": gen_fps(timed["reencode"]) / sim_fps,
        "generator_ensemble_over_sim_frames_per_s": (
            gen_fps(timed["ensemble"]) / sim_fps if members else None
        ),
    }
    print(f"{'setting':52s} {'removed':>7s} {'bad':>4s} {'precision':>9s} {'recall':>6s}")
    for r in rows:
        if r["kind"] == "filter":
            p = "-" if r["precision"] is None else f"{r['precision']:.2f}"
            c = "-" if r["recall"] is None else f"{r['recall']:.2f}"
            print(f"{r['setting']:52s} {r['removed']:7d} {r['bad']:4d} {p:>9s} {c:>6s}")
        else:
            print(f"{r['setting']:52s} {r['frames_per_s']:.0f} frames/s")
    print({k: None if v is None else round(float(v), 3) for k, v in ratios.items()})
    doc = {
        "benchmark": "wm_filter",
        "bench_command": "unilab bench wm_filter " + " ".join(argv or []),
        "machine": machine,
        "quick": bool(args.quick),
        "settings": {
            k: getattr(args, k)
            for k in (
                "task",
                "demos",
                "failures",
                "starts",
                "wm_steps",
                "vla_steps",
                "rollouts",
                "max_steps",
                "max_drift",
                "seed",
                "ensemble",
                "state_policy",
                "overrides",
            )
        }
        | {
            "task_overrides": scene,
            "wm_overrides": WM_OVERRIDES,
            "vla_overrides": VLA_OVERRIDES,
        },
        "data": data,
        "train_s": {
            "world_model": round(wm_s, 1),
            "ensemble_members": round(members_s, 1),
            "vla": round(vla_s, 1),
        },
        "rollouts": {
            **_outcome_agreement(ro, sim_success),
            "generated": args.rollouts,
            "frames": generated,
            "kept_reencode": int(keep_reencode.sum()),
            "kept_ensemble": int((~ensemble_disagrees(ro.outcome, ro.outcome_members)).sum())
            if members
            else None,
            "member_agreement_with_sim": [
                float(((o == 2) == sim_success).mean()) for o in ro.outcome_members
            ],
            "member_agreement_with_main": [
                float((o == ro.outcome).mean()) for o in ro.outcome_members
            ],
            "start_state_match": start_match,
            "drift_quantiles": np.quantile(ro.drift, [0.1, 0.5, 0.9]).round(4).tolist(),
        },
        "per_rollout": {
            "length": ro.length.tolist(),
            "outcome": ro.outcome.tolist(),
            "outcome_reencoded": ro.outcome_reencoded.tolist(),
            "drift": ro.drift.round(4).tolist(),
            "outcome_members": ro.outcome_members.tolist(),
            "success_members": ro.success_members.round(4).tolist(),
            "sim_success": sim_success.astype(int).tolist(),
            "state_success": None
            if ro.state_success is None
            else ro.state_success.astype(int).tolist(),
        },
        "rows": rows,
        "ratios": ratios,
        "bench_wall_s": round(time.perf_counter() - started, 1),
    }
    out = write_json(Path(args.out), doc)
    print(f"wrote {out} ({doc['bench_wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
