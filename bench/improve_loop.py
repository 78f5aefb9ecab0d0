"""`unilab bench improve_loop`: do rounds of `unilab improve` raise success over the bc_flow
policy, and is it the rollouts that do it? (issue 16)

    unilab bench improve_loop --bases RUN0,RUN1,RUN2 [--arms takeover,demos,rollouts]
        [--rounds 2 --episodes 200 --eval-episodes 200 --takeover-after 5 --takeover-on-error]
        [--retune 30 --retune-episodes 16 --retune-compare-seeds 10] --work DIR
        [--out PATH] [awr_flow key=value overrides, e.g. algo.steps=1500]
    unilab bench improve_loop --from ARM=LOOP,LOOP,... [--from ARM=...]
        [--tuned-final ARM=EVAL,EVAL,...] --out PATH

Each base (a bc_flow run, one training seed each) goes through every arm, each one
`unilab improve` loop (`unilab.workflows.improve`) from that base:

- `takeover`: rollouts with the task's scripted expert taking over every episode still
  running after `--takeover-after` seconds, and with `--takeover-on-error` at the policy's
  mistakes (a missed grasp) too (HIL in simulation, ADR 0127);
- `rollouts`: the policy's own rollouts only (success-weighted, ADR 0123);
- `scenes`: the policy's own rollouts, each scene tried `--repeats` times and every try
  judged against its scene's mean (`unilab improve --repeats`, ADR 0123);
- `retuned`: the policy's own rollouts, with the inference settings re-tuned for every
  run (`unilab improve --retune`): each evaluation and the next rollouts run at the
  tuner's recommendation for that run;
- `demos`: no rollouts (`--episodes 0`), the same awr_flow rounds on the demonstrations
  alone: the control that shows how much of a gain is only more training.

Every evaluation is the same `--eval-episodes` episodes at seed 12345. Per arm and seed:
the start's success and each round's, the policy's own success in the rollouts, and the
episodes the expert took over; overall per arm the mean success per round, the mean final
gain over the start and the seeds it was positive on, and each arm's final success minus
the `demos` control's per seed. `--from` summarizes loops that already ran (their
`improve.json`). Writes JSON (`rows`, `ratios`) and a PNG of success per round.

`final_tuned`: each loop's final policy at settings tuned for it, the fair bar for a loop
that re-tunes ("more imitation, then tune"): a `retuned` loop's own final evaluation, and
for the other arms an eval report given with `--tuned-final` (`unilab eval FINAL_RUN
--episodes N --seeds 12345 --inference-settings TUNE_REPORT`, one per loop in `--from`
order); the ratios then compare them per seed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from unilab.bench.common import machine_info, print_table, write_json

ARMS = ("takeover", "rollouts", "scenes", "retuned", "demos")
CONTROL = "demos"


def loop_row(arm: str, report: dict[str, Any]) -> dict[str, Any]:
    """One table row from a `unilab.improve/1` report."""
    start = float(report["baseline"]["eval"]["success_rate"])
    rounds = report["rounds"]
    curve = [start, *(float(r["eval"]["success_rate"]) for r in rounds)]
    episodes = int(rounds[0]["eval"]["episodes"]) if rounds else 0
    taken = [r["rollouts"].get("takeover") for r in rounds]
    own = [r["rollouts"].get("success_rate") for r in rounds]
    return {
        "arm": arm,
        "start": report["start"],
        "curve": curve,
        "start_success": start,
        "final_success": curve[-1],
        "gain": curve[-1] - start,
        "gain_se": math.sqrt(
            (start * (1 - start) + curve[-1] * (1 - curve[-1])) / max(1, episodes)
        ),
        "eval_episodes": episodes,
        "rollout_episodes": sum(int(r["rollouts"]["episodes"]) for r in rounds),
        "rollout_steps": sum(int(r["rollouts"].get("steps", 0)) for r in rounds),
        "rollout_env_steps": sum(int(r["rollouts"].get("env_steps", 0)) for r in rounds),
        "rollout_policy_success": own,
        "repeats": int(report.get("repeats", 1)),
        "mixed_scenes": [r["rollouts"].get("mixed_scenes") for r in rounds],
        "taken_over": [t["episodes"] if t else 0 for t in taken],
        "rescued": [t["rescued"] if t else 0 for t in taken],
        "wall_s": float(report.get("wall_s", 0.0)),
        "takeover_after_s": report.get("takeover_after_s"),
        "takeover_on_error": bool(report.get("takeover_on_error", False)),
        "loop": str(Path(report["store"]).parent),
        "inference_settings": [r.get("inference_settings") for r in rounds],
        "final_tuned": curve[-1] if report.get("retune") else None,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-arm means and gains; each arm against the control, paired by base."""
    out: dict[str, Any] = {}
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_arm.setdefault(row["arm"], []).append(row)
    control = {r["start"]: r for r in by_arm.get(CONTROL, [])}
    for arm, mine in by_arm.items():
        gains = [r["gain"] for r in mine]
        out[f"{arm}_mean_curve"] = np.mean([r["curve"] for r in mine], axis=0).tolist()
        out[f"{arm}_mean_gain"] = float(np.mean(gains))
        out[f"{arm}_seeds_improved"] = int(sum(g > 0 for g in gains))
        out[f"{arm}_seeds"] = len(mine)
        if arm != CONTROL and control:
            vs = [r["final_success"] - control[r["start"]]["final_success"] for r in mine]
            out[f"{arm}_minus_{CONTROL}_final"] = float(np.mean(vs))
            out[f"{arm}_seeds_above_{CONTROL}"] = int(sum(v > 0 for v in vs))
            tuned = [
                r["final_tuned"] - control[r["start"]]["final_tuned"]
                for r in mine
                if r["final_tuned"] is not None
                and control[r["start"]].get("final_tuned") is not None
            ]
            if tuned:
                out[f"{arm}_minus_{CONTROL}_final_tuned"] = float(np.mean(tuned))
                out[f"{arm}_seeds_above_{CONTROL}_tuned"] = int(sum(v > 0 for v in tuned))
                out[f"{arm}_tuned_pairs"] = len(tuned)
    for arm, mine in by_arm.items():
        finals = [r["final_tuned"] for r in mine if r.get("final_tuned") is not None]
        if finals:
            out[f"{arm}_mean_final_tuned"] = float(np.mean(finals))
    return out


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {
        "takeover": "tab:green",
        "rollouts": "tab:orange",
        "scenes": "tab:red",
        "retuned": "tab:purple",
        "demos": "tab:blue",
    }
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        colour = colours.get(arm, "grey")
        for r in mine:  # thin: each seed; thick: the mean
            ax.plot(range(len(r["curve"])), r["curve"], color=colour, lw=0.8, alpha=0.35)
        if len({len(r["curve"]) for r in mine}) == 1:
            mean = np.mean([r["curve"] for r in mine], axis=0)
            ax.plot(range(len(mean)), mean, color=colour, lw=2.2, marker="o", label=arm)
        tuned = [r["final_tuned"] for r in mine if r.get("final_tuned") is not None]
        if arm != "retuned" and len(tuned) == len(mine):  # a retuned curve is tuned already
            x = len(mine[0]["curve"]) - 1 + 0.08
            ax.plot(
                [x],
                [np.mean(tuned)],
                color=colour,
                marker="*",
                ms=12,
                ls="none",
                label=f"{arm}, final re-tuned",
            )
    ax.set_xticks(range(max(len(r["curve"]) for r in rows)))
    ax.set_ylim(0.0, 1.0)  # the whole scale: round-to-round noise is about 0.04
    ax.set_xlabel("improvement round (0: the bc_flow start)")
    ax.set_ylabel("eval success")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def command(argv: list[str]) -> str:
    """The command line that wrote the result, less its --note lines (kept in `notes`)."""
    kept: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
        elif item == "--note":
            skip = True
        elif not item.startswith("--note="):
            kept.append(item)
    return " ".join(["unilab bench improve_loop", *kept])


def run_arms(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """Run every arm from every base (interleaved by base); -> (arm, improve report)."""
    from unilab.workflows.improve import improve
    from unilab.workflows.retune import RetuneBudget

    work = Path(args.work)
    reports = []
    for i, base in enumerate(args.bases.split(",")):
        for arm in args.arms.split(","):
            print(f"improve_loop: {arm} from base {i} ({base})", file=sys.stderr, flush=True)
            report = improve(
                base,
                rounds=args.rounds,
                episodes=0 if arm == CONTROL else args.episodes,
                out=work / f"{arm}_base{i}",
                eval_episodes=args.eval_episodes,
                seed=i,
                overrides=args.overrides,
                takeover_after_s=args.takeover_after if arm == "takeover" else None,
                takeover_on_error=args.takeover_on_error and arm == "takeover",
                repeats=args.repeats if arm == "scenes" else 1,
                retune_budget=(
                    RetuneBudget(args.retune, args.retune_episodes, args.retune_compare_seeds)
                    if arm == "retuned"
                    else None
                ),
            )
            reports.append((arm, report))
    return reports


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="unilab bench improve_loop", description=__doc__)
    p.add_argument("--bases", help="bc_flow run directories, comma-separated (one per seed)")
    p.add_argument("--arms", default="takeover,demos", help=f"of {', '.join(ARMS)}")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--episodes", type=int, default=200, help="rollout episodes per round")
    p.add_argument("--eval-episodes", type=int, default=200)
    p.add_argument("--takeover-after", type=float, default=5.0, help="seconds (takeover arm)")
    p.add_argument(
        "--takeover-on-error",
        action="store_true",
        help="takeover arm: the expert also takes over at the policy's mistakes",
    )
    p.add_argument("--repeats", type=int, default=4, help="tries per scene (scenes arm)")
    p.add_argument("--retune", type=int, default=30, help="tuner rounds per run (retuned arm)")
    p.add_argument("--retune-episodes", type=int, default=16, help="episodes per tuner round")
    p.add_argument("--retune-compare-seeds", type=int, default=10)
    p.add_argument("--work", help="folder for the loops (kept)")
    p.add_argument(
        "--from",
        dest="loops",
        action="append",
        default=[],
        metavar="ARM=DIR,DIR",
        help="summarize loops that already ran (folders holding improve.json)",
    )
    p.add_argument(
        "--tuned-final",
        action="append",
        default=[],
        metavar="ARM=EVAL,EVAL",
        help="eval reports of the arm's final policies at settings tuned for them, one per "
        "--from loop of that arm, in order",
    )
    p.add_argument("--out", default="")
    p.add_argument("--note", action="append", default=[], help="a line for the JSON's notes")
    p.add_argument("overrides", nargs="*", help="awr_flow key=value overrides, every round")
    args = p.parse_args(argv)
    if args.loops:
        reports = []
        for item in args.loops:
            arm, _, dirs = item.partition("=")
            if arm not in ARMS or not dirs:
                p.error(f"--from {item!r}: expected ARM=DIR,DIR with ARM one of {ARMS}")
            for d in dirs.split(","):
                reports.append((arm, json.loads((Path(d) / "improve.json").read_text())))
    else:
        if not args.bases or not args.work:
            p.error("give --bases and --work to run the loops, or --from to summarize")
        unknown = [a for a in args.arms.split(",") if a not in ARMS]
        if unknown:
            p.error(f"--arms: unknown {unknown}; choose from {', '.join(ARMS)}")
        reports = run_arms(args)
    rows = [loop_row(arm, report) for arm, report in reports]
    for item in args.tuned_final:
        arm, _, files = item.partition("=")
        mine = [r for r in rows if r["arm"] == arm]
        evals = files.split(",") if files else []
        if not mine or len(evals) != len(mine):
            p.error(f"--tuned-final {item!r}: give one eval report per {arm!r} loop ({len(mine)})")
        for row, path in zip(mine, evals, strict=True):
            report = json.loads(Path(path).read_text())
            row["final_tuned"] = float(report["success_rate"])
            row["final_tuned_eval"] = {"path": path, "execution": report.get("execution")}
    task = Path(rows[0]["start"]).parts[-3] if len(Path(rows[0]["start"]).parts) >= 3 else "?"
    out = Path(args.out or f"bench/results/improve_loop_{task}.json")
    print_table(
        rows,
        [
            "arm",
            "start_success",
            "final_success",
            "gain",
            "final_tuned",
            "taken_over",
            "mixed_scenes",
        ],
    )
    ratios = summarize(rows)
    for key, value in ratios.items():
        print(f"{key}: {value}")
    plot(rows, out.with_suffix(".png"), f"unilab improve on {task}: success per round")
    write_json(
        out,
        {
            "schema": "unilab.bench.improve_loop/1",
            "command": command(sys.argv[1:] if argv is None else argv),
            "task": task,
            "rows": rows,
            "ratios": ratios,
            "settings": {
                k: getattr(args, k)
                for k in (
                    "rounds",
                    "episodes",
                    "eval_episodes",
                    "takeover_after",
                    "takeover_on_error",
                    "repeats",
                    "retune",
                    "retune_episodes",
                    "retune_compare_seeds",
                    "overrides",
                )
            },
            "notes": args.note,
            "machine": machine_info(),
            "argv": sys.argv[1:] if argv is None else argv,
        },
    )
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
