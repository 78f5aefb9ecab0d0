"""`unilab bench segment_critic`: the segmentation critic on sim episodes whose segments
are known, and behaviour cloning on its curated set against all frames.

Each seed is an independent replicate:

1. Ground truth: `unilab.teleop.segmentation.ground_truth` writes mixed-quality
   arm_pick_place episodes (scripted expert as the policy; injected idle spans,
   failure-inducing spans, operator recoveries marked as interventions) into a training
   store and a held-out store (another generator seed), each frame's true label in
   `true_segment`.
2. The progress model trains on the training store (it never reads `true_segment`);
   `label_store` writes the `segment` column of both stores. Per-frame accuracy (overall,
   per class, confusion matrix) is scored on the held-out store.
3. `curate` builds the curated store from the labelled training store, and an oracle
   curated store from the true labels (the ceiling of curation). A state MLP is
   behaviour-cloned on (a) every frame, (b) the curated store, (c) the oracle store, with
   the same gradient steps and batch size; each policy runs `--eval-episodes` fresh
   episodes in sim (one evaluation seed per replicate, shared by the arms) and its
   success rate is reported.

Writes JSON (default bench/results/segment_critic.json) and a PNG beside it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.bench.common import machine_info, print_table, write_json
from unilab.bench.segment_bc import evaluate, train_bc
from unilab.data.relabel import write_column
from unilab.data.store import EpisodeStore
from unilab.teleop.segmentation import (
    CurateConfig,
    SegmentConfig,
    curate,
    label_store,
    train_progress_model,
)
from unilab.teleop.segmentation.ground_truth import TASK_OVERRIDES, TRUE_FIELD, MixConfig, generate
from unilab.teleop.segmentation.scoring import confusion, scores

DEFAULT_OUT = "bench/results/segment_critic.json"
ARMS = ("all_frames", "curated", "oracle_curated")
SIZES = ("episodes", "heldout", "critic_steps", "bc_steps", "batch", "seeds", "eval_episodes")
SEGMENT_KEYS = (
    "window",
    "smooth",
    "progress_threshold",
    "failure_threshold",
    "min_progress",
    "min_idle",
    "min_failure",
    "recovery_window",
)


def store_confusion(path: Path) -> np.ndarray:
    with EpisodeStore.open(path, "r") as st:
        return confusion(st.read(TRUE_FIELD), st.read("segment"))


def oracle_curate(train: Path, out: Path, cfg: CurateConfig) -> dict[str, Any]:
    """Curate with the true labels (written into `segment` of `train`, which is done with
    its predicted labels by now)."""
    with EpisodeStore.open(train, "a") as st:
        write_column(st, "segment", st.read(TRUE_FIELD))
    return curate(train, out, cfg).to_json()


def replicate(args: argparse.Namespace, seed: int, work: Path) -> dict[str, Any]:
    """One seed: data, critic, labels, curation, three BC arms and their evaluation."""
    t0 = time.perf_counter()
    train, heldout = work / f"train-{seed}.zarr", work / f"heldout-{seed}.zarr"
    gen = {
        "train": generate(train, args.episodes, seed=seed),
        "heldout": generate(heldout, args.heldout, seed=seed + 1000),
    }
    cfg = SegmentConfig()
    cfg.model.steps, cfg.model.seed = args.critic_steps, seed
    t1 = time.perf_counter()
    model, report = train_progress_model(train, cfg.model)
    t_critic = time.perf_counter() - t1
    label_store(train, model, cfg)
    label_store(heldout, model, cfg)
    cm_heldout, cm_train = store_confusion(heldout), store_confusion(train)
    ccfg = CurateConfig()
    stores = {"all_frames": train, "curated": work / f"curated-{seed}.zarr"}
    cur = curate(train, stores["curated"], ccfg).to_json()
    stores["oracle_curated"] = work / f"oracle-{seed}.zarr"
    oracle = oracle_curate(train, stores["oracle_curated"], ccfg)
    success = {}
    for arm in ARMS:
        policy = train_bc(stores[arm], args.bc_steps, args.batch, seed, arm != "all_frames")
        success[arm] = evaluate(policy, args.eval_episodes, seed=seed + 5000)
        print(f"  seed {seed} bc {arm:<15} success {success[arm]:.3f}", flush=True)
    return {
        "seed": seed,
        "generated": gen,
        "critic": {
            "pairs": report["pairs"],
            "loss_first": report["losses"][0],
            "loss_last": float(np.mean(report["losses"][-50:])),
            "val_loss": report.get("val_loss"),
            "pace_frames": report["pace"],
            "seconds": t_critic,
        },
        "heldout_confusion": cm_heldout.tolist(),
        "heldout_accuracy": scores(cm_heldout)["accuracy"],
        "train_accuracy": scores(cm_train)["accuracy"],
        "curate": cur,
        "oracle_curate": oracle,
        "success": success,
        "seconds": time.perf_counter() - t0,
    }


def summarize(reps: list[dict[str, Any]]) -> dict[str, Any]:
    cm = np.sum([np.asarray(r["heldout_confusion"]) for r in reps], axis=0)
    acc = [r["heldout_accuracy"] for r in reps]
    rows = []
    for arm in ARMS:
        vals = [r["success"][arm] for r in reps]
        frames = (
            reps[0]["curate"]["source_frames"]
            if arm == "all_frames"
            else reps[0]["curate" if arm == "curated" else "oracle_curate"]["frames"]
        )
        rows.append(
            {
                "training set": arm,
                "frames (seed 0)": frames,
                "success mean": float(np.mean(vals)),
                "success std": float(np.std(vals)),
                "success per seed": " ".join(f"{v:.2f}" for v in vals),
            }
        )
    mean = {r["training set"]: r["success mean"] for r in rows}
    diffs = [r["success"]["curated"] - r["success"]["all_frames"] for r in reps]
    return {
        "labels_heldout": scores(cm),
        "accuracy_per_seed": {"mean": float(np.mean(acc)), "std": float(np.std(acc))},
        "rows": rows,
        "curated_minus_all": {
            "mean": float(np.mean(diffs)),
            "std": float(np.std(diffs)),
            "seeds_better": int(sum(d > 0 for d in diffs)),
        },
        "ratios": {
            "label_accuracy": scores(cm)["accuracy"],
            "curated_vs_all_success": mean["curated"] / mean["all_frames"]
            if mean["all_frames"] > 0
            else None,
        },
    }


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
    for k, arm in enumerate(ARMS):
        vals = [r["success"][arm] for r in doc["replicates"]]
        ax0.bar(k, np.mean(vals), yerr=np.std(vals), color=f"C{k}", alpha=0.6, capsize=6)
        ax0.scatter(np.full(len(vals), k), vals, color="k", s=14, zorder=3)
    ax0.set_xticks(range(len(ARMS)), ARMS)
    ax0.set_ylabel("evaluated success (mean ± std over seeds)")
    ax0.set_title(f"BC, {doc['settings']['bc_steps']} steps each")
    cm = np.asarray(doc["labels_heldout"]["confusion"]["matrix"])[1:, 1:].astype(float)
    norm = cm / np.maximum(cm.sum(1, keepdims=True), 1)
    names = doc["labels_heldout"]["confusion"]["rows_true_cols_predicted"][1:]
    ax1.imshow(norm, cmap="Blues", vmin=0, vmax=1)
    for i in range(norm.shape[0]):
        for j in range(norm.shape[1]):
            ax1.text(j, i, f"{norm[i, j]:.2f}", ha="center", va="center", fontsize=9)
    ax1.set_xticks(range(len(names)), names)
    ax1.set_yticks(range(len(names)), names)
    ax1.set_xlabel("predicted")
    ax1.set_ylabel("true")
    ax1.set_title(f"held-out frames (accuracy {doc['labels_heldout']['accuracy']:.3f})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_report(doc: dict[str, Any]) -> None:
    lab = doc["labels_heldout"]
    print(f"held-out per-frame label accuracy {lab['accuracy']:.3f} over {lab['frames']} frames")
    print_table(
        [{"class": c, **lab["per_class"][c]} for c in lab["per_class"]],
        ["class", "frames", "recall", "precision"],
    )
    print_table(
        doc["rows"],
        ["training set", "frames (seed 0)", "success per seed", "success mean", "success std"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench segment_critic", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--episodes", type=int, default=300, help="training-store episodes")
    parser.add_argument("--heldout", type=int, default=60, help="held-out episodes for labels")
    parser.add_argument("--critic-steps", type=int, default=2000)
    parser.add_argument("--bc-steps", type=int, default=4000, help="gradient steps per arm")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seeds", type=int, default=10, help="independent replicates")
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="first replicate's seed")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if args.quick:
        args.episodes, args.heldout, args.critic_steps = 40, 16, 200
        args.bc_steps, args.seeds, args.eval_episodes = 200, 1, 8
    for name in SIZES:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    torch.set_num_threads(1)  # the episodes step MuJoCo in this process
    os.environ.setdefault("MUJOCO_GL", "egl")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="segment_critic-") as tmp:
        reps = [replicate(args, args.seed + s, Path(tmp)) for s in range(args.seeds)]
    doc: dict[str, Any] = {
        "benchmark": "segment_critic",
        "command": "unilab bench segment_critic "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "quick": args.quick,
        "machine": machine_info(),
        "settings": {k: getattr(args, k) for k in (*SIZES, "seed")},
        "task_overrides": list(TASK_OVERRIDES),
        "mix": MixConfig().__dict__,
        "segment_config": {k: getattr(SegmentConfig(), k) for k in SEGMENT_KEYS},
        "curate_config": CurateConfig().__dict__,
        **summarize(reps),
        "replicates": reps,
        "seconds": time.perf_counter() - t0,
    }
    print_report(doc)
    out = Path(args.out)
    png = out.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    plot(doc, png)
    doc["plot"] = str(png)
    path = write_json(out, doc)
    print(f"wrote {path} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
