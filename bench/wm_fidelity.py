"""`unilab bench wm_fidelity`: open-loop error of the world model vs horizon, against the
copy-last-frame baseline, on held-out episodes of tabletop tasks.

    unilab bench wm_fidelity --tasks arm_move_side,arm_pick_place --episodes 60 \\
        --eval-episodes 12 --steps 1500 --seeds 0,1,2 --chunks 6 [key=value ...]

Per task: `--episodes` expert episodes (training store) and `--eval-episodes` more from
another seed (held-out store) are recorded; per seed a world model trains with
`unilab wm train` settings (the real Runner, offline loop) for `--steps` gradient steps;
`unilab.worldmodel.fidelity.open_loop` scores it on the held-out store. Writes JSON (per
task and seed the curves; means over seeds; `ratios`: copy-last latent error over the
model's at the longest horizon, per task) and a PNG of the mean curves.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from unilab.bench.common import machine_info, write_json
from unilab.bench.expert_demos import write_expert_store
from unilab.config.compose import compose
from unilab.workflows.train import train
from unilab.worldmodel.fidelity import load_world_model, open_loop

DEFAULT_OUT = "bench/results/wm_fidelity.json"
KEYS = ("latent_mse", "psnr_db", "proprio_mse")


def _mean_curves(docs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"horizon_steps": docs[0]["horizon_steps"]}
    for who in ("model", "copy_last"):
        out[who] = {k: np.mean([d[who][k] for d in docs], axis=0).round(6).tolist() for k in KEYS}
        out[f"{who}_std"] = {
            k: np.std([d[who][k] for d in docs], axis=0).round(6).tolist() for k in KEYS
        }
    return out


def _plot(per_task: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(per_task), 3, figsize=(11, 3.0 * len(per_task)), squeeze=False)
    labels = ("latent MSE", "PSNR (dB, higher is better)", "proprio MSE (normalized)")
    for row, (task, doc) in zip(axes, per_task.items(), strict=True):
        x = doc["horizon_steps"]
        for ax, key, label in zip(row, KEYS, labels, strict=True):
            for who, style in (("model", "o-"), ("copy_last", "s--")):
                mean, std = np.array(doc[who][key]), np.array(doc[f"{who}_std"][key])
                ax.plot(x, mean, style, label="world model" if who == "model" else "copy last")
                ax.fill_between(x, mean - std, mean + std, alpha=0.2)
            ax.set_title(f"{task}: {label}", fontsize=9)
            ax.set_xlabel("steps ahead (open loop)")
        row[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench wm_fidelity", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--tasks", default="arm_move_side,arm_pick_place")
    parser.add_argument("--episodes", type=int, default=60, help="training episodes per task")
    parser.add_argument("--eval-episodes", type=int, default=12, help="held-out episodes")
    parser.add_argument("--steps", type=int, default=1500, help="gradient steps per model")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--chunks", type=int, default=6, help="chunks rolled out open loop")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. algo.latent_dim=32")
    args = parser.parse_args(argv)
    if args.quick:
        args.episodes, args.eval_episodes, args.steps, args.seeds = 4, 2, 20, "0"
    tasks = [t for t in args.tasks.split(",") if t]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    machine, started = machine_info(), time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="wm_fidelity_"))
    task_overrides = [o for o in args.overrides if o.startswith(("task.", "sim."))]
    results: dict[str, Any] = {}
    for task in tasks:
        train_store, eval_store = work / f"{task}.zarr", work / f"{task}_eval.zarr"
        write_expert_store(train_store, task, args.episodes, overrides=task_overrides, seed=0)
        write_expert_store(eval_store, task, args.eval_episodes, overrides=task_overrides, seed=1)
        runs = []
        for seed in seeds:
            cfg = compose(
                [
                    f"task={task}",
                    "algo=world_model",
                    "eval.every=0",
                    "viz.rerun=false",
                    "run.export=false",
                    "run.quiet=true",
                    f"run.seed={seed}",
                    f"run.out_dir={work / 'runs'}",
                    f"data.store={train_store}",
                    f"algo.steps={args.steps}",
                    *args.overrides,
                ]
            )
            t0 = time.perf_counter()
            run = train(cfg)
            assert run is not None
            train_s = time.perf_counter() - t0
            doc = open_loop(load_world_model(run.path), eval_store, chunks=args.chunks)
            doc.update(seed=seed, train_s=round(train_s, 1))
            runs.append(doc)
            m, c = doc["model"]["latent_mse"][-1], doc["copy_last"]["latent_mse"][-1]
            print(
                f"{task} seed {seed}: {train_s:.0f} s; latent mse at the end {m:.4g} (copy {c:.4g})"
            )
        results[task] = {"runs": runs, "mean": _mean_curves(runs)}
    ratios = {
        f"{task}_copy_over_model_latent_mse_at_max_h": r["mean"]["copy_last"]["latent_mse"][-1]
        / max(r["mean"]["model"]["latent_mse"][-1], 1e-12)
        for task, r in results.items()
    }
    ratios |= {
        f"{task}_model_minus_copy_psnr_db_at_max_h": r["mean"]["model"]["psnr_db"][-1]
        - r["mean"]["copy_last"]["psnr_db"][-1]
        for task, r in results.items()
    }
    out = Path(args.out)
    doc_out = {
        "benchmark": "wm_fidelity",
        "bench_command": "unilab bench wm_fidelity " + " ".join(argv or []),
        "machine": machine,
        "quick": bool(args.quick),
        "settings": {
            "episodes": args.episodes,
            "eval_episodes": args.eval_episodes,
            "steps": args.steps,
            "seeds": seeds,
            "chunks": args.chunks,
            "overrides": args.overrides,
        },
        "tasks": results,
        "ratios": ratios,
        "targets": {k: 1.0 for k in ratios if "copy_over_model" in k},
        "bench_wall_s": round(time.perf_counter() - started, 1),
    }
    write_json(out, doc_out)
    _plot({t: r["mean"] for t, r in results.items()}, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
