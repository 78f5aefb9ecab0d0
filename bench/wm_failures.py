"""`unilab bench wm_failures`: does a world model trained with failure rollouts predict the
failures that a demo-only model misses?

    unilab bench wm_failures --task arm_move_side --demos 40 --failures 40 --eval 40 \\
        --wm-steps 3000 [key=value ...]

Two one-step world models (`algo.horizon=1`, 32 px, one camera, the same seed and steps)
train on the same solved expert demos; one of them also on `--failures` episodes of the
expert with a constant per-episode offset on its motion axes (mostly failures;
`unilab.bench.wm_episodes.record_episodes`). On held-out episodes of the same mixture (other
seeds; the simulator says which failed) plus `--eval / 2` solved expert episodes, each model rolls open loop from the first frame
with the recorded actions, as the generator does: the episode's predicted outcome is the
success head at the first step where the done head says the episode ends (no end: not a
success). Agreement with the simulator is reported on the failed and on the solved
held-out episodes; `ratios` holds the failure agreement of the model with failures over the
demo-only model's.

With `--state-policy` the models predict the task's critic state (objects included), and
the generator's `state` filter is scored on the same episodes, where the simulator's
verdict is known for successes and failures alike: the task's rule on the predicted end
state against the success head; precision and recall at removing the episodes whose
predicted outcome is wrong (`state_filter` per model).
"""

from __future__ import annotations

import argparse
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
    WM_OVERRIDES,
    filter_quality,
    record_episodes,
    train_run,
)
from unilab.data import EpisodeStore
from unilab.worldmodel.consistency import state_disagrees
from unilab.worldmodel.fidelity import LoadedWorldModel, load_world_model
from unilab.worldmodel.state_rule import task_state_rule

DEFAULT_OUT = "bench/results/wm_failures.json"


@torch.no_grad()
def predicted_outcomes(loaded: LoadedWorldModel, store: Path) -> dict[str, np.ndarray]:
    """Per episode of `store`: the model rolled open loop (one step per recorded action)
    from the first frame -> `success` (predicted), `ended` (the done head fired within the
    episode's length), `p_success_max` (the largest P(end in success) along the way),
    `end_state` (the predicted proprioception where it ended, or after the last action)."""
    m = loaded.model
    with EpisodeStore.open(store, "r") as st:
        fields = [f"images/{c}" for c in m.cameras] + ["action", loaded.proprio_field]
        eps = [st.episode(i, fields) for i in range(len(st))]
    n = len(eps)
    length = np.array([len(e["action"]) for e in eps])
    actions = np.zeros((n, int(length.max()), m.action_dim), np.float32)
    for i, e in enumerate(eps):
        actions[i, : length[i]] = e["action"]
    z = m.encode(
        {c: torch.from_numpy(np.stack([e[f"images/{c}"][0] for e in eps])) for c in m.cameras}
    )
    p = m.proprio_norm(torch.from_numpy(np.stack([e[loaded.proprio_field][0] for e in eps])))
    pad = torch.zeros(n, 1, dtype=torch.bool)
    ended, success = np.zeros(n, bool), np.zeros(n, bool)
    p_max = np.zeros(n)
    end_state = np.zeros((n, m.proprio_dim), np.float32)
    for t in range(int(length.max())):
        z, p, _, done, win = m.predict(z, p, torch.from_numpy(actions[:, t : t + 1]), pad)
        live = (t < length) & ~ended
        end_state[live] = m.proprio_norm.inverse(p).numpy()[live]
        p_win = torch.sigmoid(win).numpy()
        p_max[live] = np.maximum(p_max[live], p_win[live])
        fired = (torch.sigmoid(done) > 0.5).numpy() & live
        success[fired] = p_win[fired] > 0.5
        ended |= fired
    return {"success": success, "ended": ended, "p_success_max": p_max, "end_state": end_state}


def _scores(pred: dict[str, np.ndarray], truth: np.ndarray) -> dict[str, Any]:
    fail, win = ~truth, truth
    agree = pred["success"] == truth

    def mean(x: np.ndarray, mask: np.ndarray) -> float | None:
        return float(x[mask].mean()) if mask.any() else None

    return {
        "agreement_on_failures": mean(agree, fail),
        "agreement_on_successes": mean(agree, win),
        "agreement_all": float(agree.mean()),
        "predicted_success_on_failures": mean(pred["success"], fail),
        "ended_on_failures": mean(pred["ended"], fail),
        "p_success_max_on_failures": mean(pred["p_success_max"], fail),
        "p_success_max_on_successes": mean(pred["p_success_max"], win),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab bench wm_failures", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--task", default="arm_move_side")
    parser.add_argument("--demos", type=int, default=40, help="solved expert episodes")
    parser.add_argument("--failures", type=int, default=40, help="offset-expert episodes")
    parser.add_argument("--eval", type=int, default=40, help="held-out offset-expert episodes")
    parser.add_argument("--wm-steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--state-policy",
        action="store_true",
        help="models of the critic state (task.state_policy=true); scores the state filter",
    )
    parser.add_argument("--out", default="", help=f"default {DEFAULT_OUT} (_state: --state-policy)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument(
        "overrides", nargs="*", help="world-model overrides, e.g. algo.latent_dim=32"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.demos, args.failures, args.eval, args.wm_steps = 4, 4, 6, 20
    if not args.out:
        args.out = DEFAULT_OUT.replace(".json", "_state.json") if args.state_policy else DEFAULT_OUT
    scene = [*TASK_OVERRIDES, *(["task.state_policy=true"] if args.state_policy else [])]
    torch.set_num_threads(1)
    machine, started = machine_info(), time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="wm_failures_"))
    task = args.task
    demos, mixed, held_out = work / "demos.zarr", work / "mixed.zarr", work / "eval.zarr"
    data = {
        "demos": record_episodes(demos, task, range(args.demos), overrides=scene, solved_only=True),
        "mixed_demos": record_episodes(
            mixed, task, range(args.demos), overrides=scene, solved_only=True
        ),
        "failures": record_episodes(
            mixed,
            task,
            range(10_000, 10_000 + args.failures),
            overrides=scene,
            max_offset=MAX_OFFSET,
        ),
        "eval": record_episodes(
            held_out,
            task,
            range(30_000, 30_000 + args.eval),
            overrides=scene,
            max_offset=MAX_OFFSET,
        ),
        "eval_solved": record_episodes(
            held_out,
            task,
            range(40_000, 40_000 + args.eval // 2),
            overrides=scene,
            solved_only=True,
        ),
    }
    print(f"episodes: {data}")
    with EpisodeStore.open(held_out, "r") as st:
        truth = np.array([bool(m.success) for m in st.all_meta()])
    models: dict[str, Any] = {}
    for name, store in (("demos_only", demos), ("with_failures", mixed)):
        t0 = time.perf_counter()
        run = train_run(
            task,
            [
                *scene,
                "algo=world_model",
                "algo.horizon=1",
                f"algo.steps={args.wm_steps}",
                *WM_OVERRIDES,
                f"data.store={store}",
                *args.overrides,
            ],
            work / name,
            args.seed,
        )
        train_s = time.perf_counter() - t0
        pred = predicted_outcomes(load_world_model(run), held_out)
        scores = _scores(pred, truth)
        if args.state_policy:
            rule = task_state_rule(run)(pred["end_state"])
            removed = state_disagrees(np.where(pred["success"], 2, 1), rule)
            scores["state_filter"] = filter_quality(removed, pred["success"] != truth)
            scores["state_rule_agreement"] = float((rule == truth).mean())
        models[name] = {**scores, "train_s": round(train_s, 1)}
        print(f"{name}: {train_s:.0f} s; {scores}")
    rows = [{"model": name, **v} for name, v in models.items()]
    demo_only, with_fail = models["demos_only"], models["with_failures"]
    ratios = {
        "failure_agreement_with_over_without_failures": (
            with_fail["agreement_on_failures"] / max(demo_only["agreement_on_failures"], 1e-9)
            if with_fail["agreement_on_failures"] is not None
            else None
        ),
        "failure_agreement_with_minus_without": (
            with_fail["agreement_on_failures"] - demo_only["agreement_on_failures"]
            if with_fail["agreement_on_failures"] is not None
            else None
        ),
    }
    print(f"{'model':15s} {'agree fail':>10s} {'agree win':>9s} {'P(win) max fail':>15s}")
    for r in rows:
        f = "-" if r["agreement_on_failures"] is None else f"{r['agreement_on_failures']:.2f}"
        w = "-" if r["agreement_on_successes"] is None else f"{r['agreement_on_successes']:.2f}"
        q = (
            "-"
            if r["p_success_max_on_failures"] is None
            else f"{r['p_success_max_on_failures']:.2f}"
        )
        print(f"{r['model']:15s} {f:>10s} {w:>9s} {q:>15s}")
        if "state_filter" in r:
            sf = r["state_filter"]
            print(
                f"  state filter: removed {sf['removed']} of which wrong {sf['removed_and_bad']} "
                f"(wrong in all {sf['bad']}); wrong among kept {sf['bad_rate_kept']} vs all "
                f"{sf['bad_rate_all']:.2f}; the rule alone agrees {r['state_rule_agreement']:.2f}"
            )
    doc = {
        "benchmark": "wm_failures",
        "bench_command": "unilab bench wm_failures " + " ".join(argv or []),
        "machine": machine,
        "quick": bool(args.quick),
        "settings": {
            "task": task,
            "demos": args.demos,
            "failures": args.failures,
            "eval": args.eval,
            "eval_failed": int((~truth).sum()),
            "eval_solved": int(truth.sum()),
            "wm_steps": args.wm_steps,
            "seed": args.seed,
            "task_overrides": scene,
            "state_policy": bool(args.state_policy),
            "wm_overrides": WM_OVERRIDES,
            "overrides": args.overrides,
        },
        "data": data,
        "rows": rows,
        "ratios": ratios,
        "bench_wall_s": round(time.perf_counter() - started, 1),
    }
    out = write_json(Path(args.out), doc)
    print(f"wrote {out} ({doc['bench_wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
