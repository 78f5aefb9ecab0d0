"""`unilab bench segment_critic`: the segmentation critic on sim episodes whose segments
are known, and behaviour cloning on its curated set against all frames.

1. Ground truth: `unilab.teleop.segmentation.ground_truth` writes mixed-quality
   arm_pick_place episodes (scripted expert as the policy; injected idle spans,
   failure-inducing spans, operator recoveries marked as interventions) into a training
   store and a held-out store (other seeds), each frame's true label in `true_segment`.
2. The progress model trains on the training store (no labels read); `label_store` writes
   the `segment` column of both stores. Per-frame accuracy (overall, per class, confusion
   matrix) on the held-out store.
3. `curate` builds the curated store from the labelled training store. A state MLP is
   behaviour-cloned (MSE on the action, `FrameDataset` batches) on (a) every frame of the
   training store and (b) the curated store (`WeightedFrameSampler`), with the same
   gradient steps and batch size, for several seeds; each policy runs `--eval-episodes`
   fresh episodes in sim (other seeds again) and its success rate is reported.

Writes JSON (default bench/results/segment_critic.json) and prints tables.
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
from torch import nn

from unilab.bench.common import machine_info, print_table, write_json
from unilab.data.dataset import FrameDataset
from unilab.data.sampler import WeightedFrameSampler
from unilab.data.schema import SEGMENTS
from unilab.data.store import EpisodeStore
from unilab.teleop.segmentation import (
    CurateConfig,
    SegmentConfig,
    curate,
    label_store,
    train_progress_model,
)
from unilab.teleop.segmentation.ground_truth import TRUE_FIELD, generate, task_config

DEFAULT_OUT = "bench/results/segment_critic.json"
CLASSES = SEGMENTS[1:]


def label_scores(store_path: Path) -> dict[str, Any]:
    """Per-frame accuracy of `segment` against `true_segment` in a labelled store."""
    with EpisodeStore.open(store_path, "r") as st:
        pred, true = st.read("segment"), st.read(TRUE_FIELD)
    k = len(SEGMENTS)
    cm = np.zeros((k, k), dtype=np.int64)
    np.add.at(cm, (true, pred), 1)
    per_class = {
        SEGMENTS[c]: {
            "frames": int(cm[c].sum()),
            "recall": float(cm[c, c] / cm[c].sum()) if cm[c].sum() else None,
            "precision": float(cm[c, c] / cm[:, c].sum()) if cm[:, c].sum() else None,
        }
        for c in range(1, k)
    }
    return {
        "frames": int(true.size),
        "accuracy": float((pred == true).mean()),
        "per_class": per_class,
        "confusion": {
            "rows_true_cols_predicted": list(SEGMENTS),
            "matrix": cm.tolist(),
        },
    }


class MLPPolicy(nn.Module):
    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden),
            nn.SiLU(),
            nn.Linear(hidden, hidden),
            nn.SiLU(),
            nn.Linear(hidden, action_dim),
        )
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("std", torch.ones(obs_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net((obs - self.mean) / self.std)


def train_bc(store: Path, steps: int, batch: int, seed: int, weighted: bool) -> MLPPolicy:
    """MSE behaviour cloning of obs/policy -> action; items drawn uniformly, or in
    proportion to the store's `weight` column (`weighted`)."""
    torch.manual_seed(seed)
    data = FrameDataset(store, fields=["obs/policy", "action"])
    try:
        rng = np.random.default_rng(seed)
        sampler = WeightedFrameSampler(data, batch, seed=seed) if weighted else None
        every = data.batch(np.arange(len(data)))
        obs_all = every["obs/policy"].float()
        policy = MLPPolicy(obs_all.shape[1], every["action"].shape[1])
        policy.mean.copy_(obs_all.mean(0))
        policy.std.copy_(obs_all.std(0).clamp_min(1e-2))
        opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
        for _ in range(steps):
            items = (
                sampler.draw(batch) if sampler is not None else rng.integers(0, len(data), batch)
            )
            b = data.batch(items)
            loss = ((policy(b["obs/policy"].float()) - b["action"].float()) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        data.close()
    policy.eval()
    return policy


def evaluate(policy: MLPPolicy, episodes: int, seed: int) -> float:
    """Success rate of `policy` over the first episode of `episodes` fresh envs."""
    from unilab.tasks.registry import make_task

    task = make_task(task_config(), num_envs=episodes, seed=seed)
    try:
        obs = task.reset()
        done = np.zeros(episodes, dtype=bool)
        success = np.zeros(episodes, dtype=bool)
        while not done.all():
            with torch.no_grad():
                act = policy(torch.from_numpy(obs["policy"]).float()).clamp(-1, 1).numpy()
            result = task.step(act)
            ended = (result.terminated | result.truncated) & ~done
            success |= ended & (result.extras["success"] > 0.5)
            done |= ended
            obs = result.obs
    finally:
        task.close()
    return float(success.mean())


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    train_store, test_store = work / "train.zarr", work / "heldout.zarr"
    gen_train = generate(train_store, args.episodes, seed=args.seed)
    gen_test = generate(test_store, args.heldout, seed=args.seed + 1000)
    t_gen = time.perf_counter() - t0

    cfg = SegmentConfig()
    cfg.model.steps = args.critic_steps
    cfg.model.seed = args.seed
    t1 = time.perf_counter()
    model, report = train_progress_model(train_store, cfg.model)
    t_critic = time.perf_counter() - t1
    label_store(train_store, model, cfg)
    label_store(test_store, model, cfg)
    scores = label_scores(test_store)
    train_scores = label_scores(train_store)

    curated = work / "curated.zarr"
    cur = curate(train_store, curated, CurateConfig())
    bc: dict[str, list[dict[str, Any]]] = {"all_frames": [], "curated": []}
    t2 = time.perf_counter()
    for s in range(args.seeds):
        for name, store, weighted in (
            ("all_frames", train_store, False),
            ("curated", curated, True),
        ):
            policy = train_bc(
                store, args.bc_steps, args.batch, seed=args.seed + s, weighted=weighted
            )
            rate = evaluate(policy, args.eval_episodes, seed=args.seed + 5000 + s)
            bc[name].append({"seed": args.seed + s, "success": rate})
            print(f"  bc {name:<10} seed {args.seed + s}: success {rate:.2f}", flush=True)
    t_bc = time.perf_counter() - t2
    summary = {
        name: {
            "mean": float(np.mean([r["success"] for r in runs])),
            "std": float(np.std([r["success"] for r in runs])),
        }
        for name, runs in bc.items()
    }
    return {
        "benchmark": "segment_critic",
        "machine": machine_info(),
        "settings": {
            k: getattr(args, k)
            for k in (
                "episodes",
                "heldout",
                "critic_steps",
                "bc_steps",
                "batch",
                "seeds",
                "eval_episodes",
                "seed",
            )
        },
        "segment_config": {
            k: getattr(cfg, k)
            for k in (
                "window",
                "smooth",
                "progress_threshold",
                "failure_threshold",
                "min_progress",
                "min_idle",
                "min_failure",
                "recovery_window",
            )
        },
        "generated": {"train": gen_train, "heldout": gen_test},
        "critic": {
            "pairs": report["pairs"],
            "loss_first": report["losses"][0],
            "loss_last": float(np.mean(report["losses"][-50:])),
            "val_loss": report.get("val_loss"),
            "pace_frames": report["pace"],
        },
        "labels_heldout": scores,
        "labels_train": {"accuracy": train_scores["accuracy"]},
        "curate": cur.to_json(),
        "bc": bc,
        "bc_summary": summary,
        "seconds": {
            "generate": t_gen,
            "critic_train": t_critic,
            "bc_train_and_eval": t_bc,
            "total": time.perf_counter() - t0,
        },
    }


def print_report(doc: dict[str, Any]) -> None:
    lab = doc["labels_heldout"]
    print(f"held-out per-frame label accuracy {lab['accuracy']:.3f} over {lab['frames']} frames")
    print_table(
        [{"class": c, **{k: v for k, v in lab["per_class"][c].items()}} for c in lab["per_class"]],
        ["class", "frames", "recall", "precision"],
    )
    rows = []
    for name, runs in doc["bc"].items():
        rows.append(
            {
                "training set": name,
                "frames": doc["curate"]["frames"]
                if name == "curated"
                else doc["curate"]["source_frames"],
                "success per seed": " ".join(f"{r['success']:.2f}" for r in runs),
                "mean": doc["bc_summary"][name]["mean"],
            }
        )
    print_table(rows, ["training set", "frames", "success per seed", "mean"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench segment_critic", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--episodes", type=int, default=200, help="training-store episodes")
    parser.add_argument("--heldout", type=int, default=60, help="held-out episodes for labels")
    parser.add_argument("--critic-steps", type=int, default=2000)
    parser.add_argument("--bc-steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if args.quick:
        args.episodes, args.heldout, args.critic_steps = 40, 16, 200
        args.bc_steps, args.seeds, args.eval_episodes = 200, 1, 8
    for name in (
        "episodes",
        "heldout",
        "critic_steps",
        "bc_steps",
        "batch",
        "seeds",
        "eval_episodes",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    torch.set_num_threads(1)
    os.environ.setdefault("MUJOCO_GL", "egl")
    with tempfile.TemporaryDirectory(prefix="segment_critic-") as tmp:
        doc = run(args, Path(tmp))
    doc["command"] = "unilab bench segment_critic " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    print_report(doc)
    path = write_json(args.out, doc)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
