"""`unilab bench value_heads RUN`: how well a VLA's own value heads (`algo.value_weight` > 0)
predict the outcome and the progress of held-out episodes.

    unilab bench value_heads RUN [--store PATH] [--bins 10]

The held-out episodes are the run's own validation split (`split_items` with the run's
seed and `algo.val_fraction`), so training never saw them; every frame of them is scored:

- P(success): Brier score against the episode's outcome, beside the constant predictor
  that always says the training episodes' success rate; reliability bins and a PNG. Three
  versions: the policy's own predictions (Platt-scaled after training when the run
  calibrated them, `algo.calibrate_success`: that fit saw these same episodes, so it is
  in-sample), the raw head, and the raw head Platt-scaled *cross-fitted* (2 folds of
  episodes, each scaled by a fit on the other: out of sample, the honest number);
- progress: Spearman correlation between predicted and true progress (t + 1) / T over the
  frames of the successful held-out episodes (the head is trained on successful episodes
  only); and over all held-out episodes, the expected progress P(success) x progress at
  each episode's last frame against its outcome-weighted true progress (1 or 0).

Writes JSON (`ratios`: progress_spearman against the issue's 0.8, brier_skill = 1 - Brier
/ constant Brier of the policy's own predictions, brier_skill_cross_fitted likewise for the
cross-fitted ones) and the reliability PNG of the cross-fitted ones, by default
`bench/results/value_heads_<task>.{json,png}`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.bench.common import machine_info, write_json


def main(argv: list[str] | None = None) -> int:
    from unilab.algos.offline import item_episodes, split_items
    from unilab.algos.value_calibration import (
        brier_score,
        cross_fitted_platt,
        platt,
        plot_reliability,
        reliability_bins,
        spearman,
    )
    from unilab.data.dataset import FrameDataset
    from unilab.export.run_policy import load_run_policy
    from unilab.policies.vla.policy import VLAPolicy

    p = argparse.ArgumentParser(prog="unilab bench value_heads", description=__doc__)
    p.add_argument("run", type=Path, help="a bc_flow / awr_flow run trained with value heads")
    p.add_argument("--store", default="", help="episode store (default: the run's data.store)")
    p.add_argument("--bins", type=int, default=10)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    loaded = load_run_policy(args.run)
    actor, cfg = loaded.actor, loaded.config
    if not isinstance(actor, VLAPolicy) or actor.value_heads is None:
        raise SystemExit(f"{args.run}: not a VLA with value heads (train with algo.value_weight>0)")
    store = str(args.store or cfg.data.store or "")
    if not store:
        raise SystemExit("no store: pass --store (the run names no data.store)")
    frames = FrameDataset(store, outcome_targets=True)
    episodes = item_episodes(frames)
    train_items, val_items = split_items(episodes, cfg.algo.val_fraction, cfg.run.seed)
    if val_items.size == 0:
        raise SystemExit("the run held out no episodes (algo.val_fraction=0)")
    success, logit, progress, truth_s, truth_p, has_p, ep = [], [], [], [], [], [], []
    proprio = cfg.algo.proprio_field
    with torch.no_grad():
        for start in range(0, val_items.size, 1024):
            batch = frames.batch(val_items[start : start + 1024])
            obs = {"policy": batch[proprio]}
            if "instruction" in actor.obs_groups:
                obs["instruction"] = batch[cfg.algo.instruction_field]
            for cam in actor.inputs.cameras:
                obs[f"images/{cam}"] = batch[f"images/{cam}"]
            pred = actor.predict_values(obs)
            success.append(pred["success"].numpy())
            logit.append(pred["success_logit"].double().numpy())
            progress.append(pred["progress"].numpy())
            truth_s.append(batch["target/success"].numpy())
            truth_p.append(batch["target/progress"].numpy())
            has_p.append(batch["target/has_progress"].numpy() > 0.5)
            ep.append(episodes[val_items[start : start + 1024]])
    ps, pp, zs = np.concatenate(success), np.concatenate(progress), np.concatenate(logit)
    ys, yp, hp, ids = map(np.concatenate, (truth_s, truth_p, has_p, ep))
    train_rate = float(np.mean([frames.batch(train_items[i : i + 4096])["target/success"].numpy().mean()
                                for i in range(0, train_items.size, 4096)]))  # fmt: skip
    brier = brier_score(ps, ys)
    brier_const = brier_score(np.full_like(ys, train_rate), ys)
    brier_raw = brier_score(platt(zs, 1.0, 0.0), ys)
    crossed = cross_fitted_platt(zs, ys, ids, folds=2, seed=0)
    brier_crossed = brier_score(crossed, ys)
    heads = actor.value_heads
    stored = {"scale": float(heads.success_scale), "bias": float(heads.success_bias)}
    rho_frames = spearman(pp[hp], yp[hp])
    last = {e: i for i, e in enumerate(ids)}  # frames come in order: the last wins
    last_idx = np.array(sorted(last.values()))
    expected_last = ps[last_idx] * pp[last_idx]
    rho_episodes = spearman(expected_last, ys[last_idx])
    centers, mean_pred, observed, counts = reliability_bins(crossed, ys, args.bins)
    task = cfg.task.name
    out = Path(args.out or f"bench/results/value_heads_{task}.json")
    title = f"held-out {task}, Platt cross-fitted"
    plot_reliability(out.with_suffix(".png"), crossed, ys, args.bins, title)
    rows = [
        {"bin_center": float(c), "mean_predicted": float(m), "observed": float(o), "frames": int(n)}
        for c, m, o, n in zip(centers, mean_pred, observed, counts, strict=True)
    ]
    doc: dict[str, Any] = {
        "benchmark": "value_heads",
        "bench_command": "unilab bench value_heads " + " ".join(argv or []),
        "run": str(args.run),
        "store": str(store),
        "machine": machine_info(),
        "held_out_episodes": int(np.unique(ids).size),
        "held_out_frames": int(ids.size),
        "held_out_success_rate": float(ys[last_idx].mean()),
        "brier": brier,
        "brier_constant": brier_const,
        "brier_raw": brier_raw,
        "brier_cross_fitted": brier_crossed,
        "stored_calibration": stored,
        "reliability_of": "cross-fitted Platt-scaled P(success)",
        "progress_spearman_frames": rho_frames,
        "expected_progress_vs_outcome_spearman_episodes": rho_episodes,
        "rows": rows,
        "ratios": {
            "progress_spearman": rho_frames,
            "brier_skill": 1.0 - brier / brier_const,
            "brier_skill_cross_fitted": 1.0 - brier_crossed / brier_const,
        },
        "targets": {"progress_spearman": 0.8},
        "bench_wall_s": time.perf_counter() - t0,
    }
    write_json(out, doc)
    print(
        f"held-out {doc['held_out_episodes']} episodes / {ids.size} frames: Brier {brier:.3f} "
        f"(raw head {brier_raw:.3f}, Platt cross-fitted {brier_crossed:.3f}, constant "
        f"{brier_const:.3f}); progress Spearman {rho_frames:.3f} over successful "
        f"episodes' frames; expected progress vs outcome (episodes) {rho_episodes:.3f}"
    )
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
