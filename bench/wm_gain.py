"""`unilab bench wm_gain`: at an equal budget of real (simulated) rollouts, does adding a world
model's synthetic rollouts raise a flow VLA's success over training on the real ones only?

    unilab bench wm_gain --task arm_move_side --seeds 0,1,2 --rounds 2 --episodes 20 \\
        --synthetic 64 [key=value ...]

Per seed (every piece of data and every model changes with it):

1. `--demos` solved expert episodes (the VLA's demos store) and, for the world model only,
   the same demos plus `--failures` episodes of the expert with a constant offset on its
   motion axes (mostly failures; `unilab.bench.wm_episodes.record_episodes`): a model that
   has seen only successes calls every episode a success (`unilab bench wm_failures`).
2. A one-step world model (`algo.horizon=1`) and a small bc_flow VLA (both 32 px, front
   camera: the sizes of `unilab bench wm_filter`). With `--state-policy` both also read
   the privileged state (`task.state_policy=true`): the world model then predicts the
   objects' positions with the arm's, and the VLA acts mostly from them.
3. Two arms of `unilab wm loop` from that VLA, each `--rounds` rounds of `--episodes` real
   rollouts, awr_flow training (`--policy-steps`) and an evaluation (`--eval-episodes`, the
   same evaluation seed everywhere):
   - `real`: `--synthetic 0`, the control (no world model);
   - `wm`: the world model fine-tuned on the real store each round, `--synthetic`
     rollouts of the policy inside it, filtered; those it calls successes
     (`--synthetic-keep`) join the training store, at most `--wm-share` of every batch.

Reports each arm's evaluated success per round and seed, the mean, the paired difference
wm - real per seed at the last round, and the synthetic episodes kept and their predicted
success. Writes JSON and, with `--png`, the curves next to it.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
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
    record_episodes,
    train_run,
)
from unilab.workflows.wm_loop import wm_loop

DEFAULT_OUT = "bench/results/wm_gain.json"
ARMS = ("real", "wm")


def _quiet(message: str) -> None:
    print(f"  {message}", flush=True)


def task_overrides(args: argparse.Namespace) -> list[str]:
    return [*TASK_OVERRIDES, *(["task.state_policy=true"] if args.state_policy else [])]


def setup_seed(task: str, seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Stores, world model and starting VLA of one seed (step 1 and 2 of the module doc)."""
    base = 100_000 * (seed + 1)
    demos, wm_store = work / "demos.zarr", work / "wm_train.zarr"
    scene = task_overrides(args)
    t0 = time.perf_counter()
    data = {
        "demos": record_episodes(
            demos, task, range(base, base + args.demos), overrides=scene, solved_only=True
        )
    }
    shutil.copytree(demos, wm_store)
    failure_seeds = range(base + 50_000, base + 50_000 + args.failures)
    data["failures"] = record_episodes(
        wm_store, task, failure_seeds, overrides=scene, max_offset=MAX_OFFSET
    )
    record_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    wm_tokens = ["algo=world_model", "algo.horizon=1", f"algo.steps={args.wm_steps}"]
    wm_run = train_run(
        task,
        [*scene, *wm_tokens, *WM_OVERRIDES, f"data.store={wm_store}", *args.wm_set],
        work / "wm",
        seed,
    )
    wm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    vla_tokens = [
        "algo=bc_flow",
        f"algo.steps={args.vla_steps}",
        f"algo.val_every={args.vla_steps}",
    ]
    vla_run = train_run(
        task,
        [*scene, *vla_tokens, *VLA_OVERRIDES, f"data.store={demos}"],
        work / "vla",
        seed,
    )
    return {
        "data": data,
        "world_model": str(wm_run),
        "vla": str(vla_run),
        "seconds": {
            "record": round(record_s, 1),
            "world_model": round(wm_s, 1),
            "vla": round(time.perf_counter() - t0, 1),
        },
    }


def run_arm(
    arm: str, setup: dict[str, Any], seed: int, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """One arm of one seed through `wm_loop`; -> success per round (round 0 = the start)."""
    t0 = time.perf_counter()
    report = wm_loop(
        setup["vla"],
        setup["world_model"] if arm == "wm" else None,
        rounds=args.rounds,
        episodes=args.episodes,
        synthetic=args.synthetic if arm == "wm" else 0,
        max_steps=args.max_steps,
        wm_steps=args.wm_finetune_steps,
        wm_share=args.wm_share,
        max_drift=args.max_drift,
        synthetic_keep=args.synthetic_keep,
        filter=args.filter,
        out=out,
        eval_episodes=args.eval_episodes,
        seed=seed,
        overrides=[f"algo.steps={args.policy_steps}", *args.overrides],
        wm_overrides=list(args.wm_set),
        log=_quiet,
    )
    rounds = report["rounds"]
    return {
        "success": [report["baseline"]["eval"]["success_rate"]]
        + [r["eval"]["success_rate"] for r in rounds],
        "real_rollout_success": [r["rollouts"]["success_rate"] for r in rounds],
        "synthetic": [
            None
            if r["synthetic"] is None
            else {
                k: r["synthetic"][k] for k in ("generated", "kept", "predicted_success", "dropped")
            }
            for r in rounds
        ],
        "loop": str(out / "wm_loop.json"),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def summarize(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Mean success per round and arm; the paired last-round difference wm - real."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        curves = np.array([s["arms"][arm]["success"] for s in per_seed.values()], float)
        out[arm] = {
            "mean": curves.mean(0).round(4).tolist(),
            "std": curves.std(0).round(4).tolist(),
        }
    last = np.array(
        [
            s["arms"]["wm"]["success"][-1] - s["arms"]["real"]["success"][-1]
            for s in per_seed.values()
        ]
    )
    best = np.array(
        [
            max(s["arms"]["wm"]["success"][1:]) - max(s["arms"]["real"]["success"][1:])
            for s in per_seed.values()
        ]
    )
    out["last_round_gain"] = {
        "per_seed": last.round(4).tolist(),
        "mean": float(last.mean()),
        "wm_ahead_seeds": int((last > 0).sum()),
        "seeds": len(last),
    }
    out["best_round_gain_mean"] = float(best.mean())
    return out


def table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """BENCHMARKS.md rows: mean success per round of each arm, and the per-seed gain."""
    rows: list[dict[str, Any]] = []
    for arm in ARMS:
        means, stds = summary[arm]["mean"], summary[arm]["std"]
        row: dict[str, Any] = {"arm": arm}
        row |= {
            f"round {k}": f"{m:.3f} ± {sd:.3f}"
            for k, (m, sd) in enumerate(zip(means, stds, strict=True))
        }
        rows.append(row)
    gain = summary["last_round_gain"]
    rows.append(
        {
            "arm": "wm - real, last round",
            "gain": f"{gain['mean']:+.3f} (per seed {gain['per_seed']})",
        }
    )
    return rows


def plot(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    colors = {"real": "tab:blue", "wm": "tab:orange"}
    labels = {"real": "real rollouts only", "wm": "real + synthetic (world model)"}
    for arm in ARMS:
        for s in doc["seeds"].values():
            ys = s["arms"][arm]["success"]
            ax.plot(range(len(ys)), ys, color=colors[arm], alpha=0.3, lw=1)
        mean = doc["summary"][arm]["mean"]
        ax.plot(range(len(mean)), mean, color=colors[arm], lw=2.5, marker="o", label=labels[arm])
    st = doc["settings"]
    ax.set_xlabel(f"round ({st['episodes']} real rollouts each)")
    ax.set_ylabel(f"success ({st['eval_episodes']} evaluation episodes)")
    inputs = "images + state" if st["state_policy"] else "images"
    ax.set_title(f"{st['task']} ({inputs}): {len(doc['seeds'])} seeds (thin), mean (thick)")
    ax.set_xticks(range(st["rounds"] + 1))
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    png = path.with_suffix(".png")
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench wm_gain", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--task", default="arm_move_side")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--demos", type=int, default=40, help="solved expert episodes (VLA + WM)")
    parser.add_argument("--failures", type=int, default=40, help="offset-expert episodes (WM only)")
    parser.add_argument("--wm-steps", type=int, default=3000, help="world-model pretraining")
    parser.add_argument("--vla-steps", type=int, default=1500, help="bc_flow steps of the start")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=20, help="real rollouts per round")
    parser.add_argument(
        "--synthetic", type=int, default=64, help="model rollouts per round (wm arm)"
    )
    parser.add_argument("--max-steps", type=int, default=150, help="steps of a model rollout")
    parser.add_argument("--max-drift", type=float, default=None, help="drift bound (default off)")
    parser.add_argument("--wm-share", type=float, default=0.25, help="cap on the synthetic share")
    parser.add_argument(
        "--filter",
        choices=("reencode", "state", "none"),
        default="reencode",
        help="the generator's filter (state: with --state-policy)",
    )
    parser.add_argument(
        "--synthetic-keep",
        choices=("success", "all"),
        default="success",
        help="synthetic episodes trained on: those the model calls successes, or all",
    )
    parser.add_argument("--wm-finetune-steps", type=int, default=500)
    parser.add_argument("--policy-steps", type=int, default=500, help="awr_flow steps per round")
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--wm-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--out", default="", help=f"default {DEFAULT_OUT} (_state with --state-policy)"
    )
    parser.add_argument("--work", default="", help="keep the runs here (default: a temp dir)")
    parser.add_argument(
        "--state-policy",
        action="store_true",
        help="world model and VLA also read the privileged state (task.state_policy=true)",
    )
    parser.add_argument("--png", action="store_true", help="also write the curves")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("overrides", nargs="*", help="awr_flow overrides, e.g. algo.beta=0.5")
    args = parser.parse_args(argv)
    if args.quick:
        args.demos, args.failures, args.wm_steps, args.vla_steps = 3, 3, 10, 4
        args.rounds, args.episodes, args.synthetic, args.max_steps = 1, 2, 3, 12
        args.wm_finetune_steps, args.policy_steps, args.eval_episodes = 3, 3, 2
        args.wm_set = [*args.wm_set, "algo.val_every=3"]
        args.overrides = [*args.overrides, "algo.val_every=3", "task.episode_length_s=1.5"]
    if not args.out:
        args.out = DEFAULT_OUT.replace(".json", "_state.json") if args.state_policy else DEFAULT_OUT
    seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    torch.set_num_threads(1)
    machine, started = machine_info(), time.perf_counter()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="wm_gain_"))
    per_seed: dict[int, dict[str, Any]] = {}
    for seed in seeds:
        folder = work / f"seed_{seed}"
        print(f"seed {seed}: data, world model, start VLA", flush=True)
        setup = setup_seed(args.task, seed, args, folder)
        arms = {}
        for arm in ARMS:
            print(f"seed {seed}: arm {arm}", flush=True)
            arms[arm] = run_arm(arm, setup, seed, args, folder / f"loop_{arm}")
            print(f"seed {seed}: arm {arm} success per round {arms[arm]['success']}", flush=True)
        per_seed[seed] = {**setup, "arms": arms}
    summary = summarize(per_seed)
    doc = {
        "benchmark": "wm_gain",
        "bench_command": "unilab bench wm_gain " + " ".join(argv or []),
        "machine": machine,
        "quick": bool(args.quick),
        "settings": {
            k: getattr(args, k)
            for k in (
                "task",
                "demos",
                "failures",
                "wm_steps",
                "vla_steps",
                "rounds",
                "episodes",
                "synthetic",
                "max_steps",
                "max_drift",
                "wm_share",
                "synthetic_keep",
                "filter",
                "wm_finetune_steps",
                "policy_steps",
                "eval_episodes",
                "state_policy",
                "wm_set",
                "overrides",
            )
        }
        | {
            "seeds": seeds,
            "task_overrides": task_overrides(args),
            "vla_overrides": VLA_OVERRIDES,
            "wm_overrides": WM_OVERRIDES,
        },
        "seeds": {str(k): v for k, v in per_seed.items()},
        "summary": summary,
        "rows": table(summary),
        "ratios": {"wm_minus_real_last_round": summary["last_round_gain"]["mean"]},
        "bench_wall_s": round(time.perf_counter() - started, 1),
    }
    out = write_json(Path(args.out), doc)
    for arm in ARMS:
        print(f"{arm:5s} success per round (mean of {len(seeds)}): {summary[arm]['mean']}")
    gain = summary["last_round_gain"]
    print(f"wm - real at the last round: {gain['mean']:+.3f} (per seed {gain['per_seed']})")
    if args.png:
        print(f"curves: {plot(doc, out)}")
    print(f"wrote {out} ({doc['bench_wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
