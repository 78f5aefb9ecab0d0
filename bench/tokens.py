"""`unilab bench tokens RUN`: what exploration tokens do for a token-conditioned flow VLA.

Two measurements on the run's task, one episode per env (envs = --episodes), same seeds
for every condition:

- **exploration coverage**, as RL rollouts explore at the start of `flow_ppo` (noisy
  K-step chains, `n_act` actions per chunk): with one token per episode drawn uniformly,
  and with the null token. Coverage = distinct end-effector paths per 100 episodes: the
  (x, y, z) position at `--points` equally spaced instants of the episode, each snapped to
  a grid of each `--cells` size (m); two episodes share a path when every instant falls in the same
  cell. Success rates come with it.
- **deployment choice** (deterministic chunks, the policy's own executor): success with
  the selector choosing the token (a run trained by flow_ppo with tokens) once per episode
  and held (`selector`, what play, eval and deploy do), choosing again at every chunk
  (`selector per chunk`), with each fixed token, and with the null token.

    unilab bench tokens RUN [--episodes 100] [--seeds 0] [--cells 0.05,0.1,0.2] [--points 4]
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.bench.common import machine_info, print_table, write_json

ROLLOUT_NOTE = "noisy chains as flow_ppo rollouts start (noise head at mid range)"


def _task_and_policy(run: Path, episodes: int, seed: int, rollout: bool) -> tuple[Any, Any]:
    """The run's task with `episodes` envs and its VLA; `rollout`: with a noise head and the
    per-episode token sampler (weights missing from the run start as flow_ppo starts)."""
    from unilab.export.run_policy import load_run_policy
    from unilab.policies.vla.policy import VLAPolicy
    from unilab.tasks.registry import make_task

    loaded = load_run_policy(run)
    actor = loaded.actor
    if not isinstance(actor, VLAPolicy):
        raise SystemExit(f"{run} is not a VLA run (its actor is {type(actor).__name__})")
    if not actor.cfg.n_tokens:
        raise SystemExit(f"{run}: the model has no tokens (train bc_flow with algo.tokens=K)")
    cfg = loaded.config
    task = make_task(cfg.task, num_envs=episodes, seed=seed, sim_cfg=cfg.sim)
    if not rollout:
        return task, actor
    model = copy.deepcopy(actor.cfg)
    model.flow_noise, model.rollout_tokens = True, True
    policy = VLAPolicy(actor.inputs, model, actor.head)
    policy.load_state_dict(actor.state_dict(), strict=False)
    if policy.token_sampler is not None:
        policy.token_sampler.seed(seed)
    return task, policy.eval()


def _episodes(task: Any, next_actions: Any, on_end: Any = None) -> dict[str, Any]:
    """One episode per env: end-effector paths (list of (T_i, 3)) and success per env."""
    n = task.num_envs
    obs = task.reset()
    done = np.zeros(n, bool)
    success = np.zeros(n)
    paths: list[list[np.ndarray]] = [[] for _ in range(n)]
    while not done.all():
        actions = next_actions(obs)
        for env in np.flatnonzero(~done):
            paths[env].append(task.ee_pos[env].copy())
        result = task.step(actions)
        ended = (result.terminated | result.truncated) & ~done
        if "success" in result.extras:
            success[ended] = result.extras["success"][ended]
        if on_end is not None:
            on_end(result.terminated | result.truncated)
        done |= ended
        obs = result.obs
    return {"paths": [np.stack(p) for p in paths], "success": success}


def distinct_paths(paths: list[np.ndarray], points: int, cell: float) -> int:
    """Distinct paths when each is sampled at `points` instants and snapped to `cell` m."""
    keys = set()
    for path in paths:
        idx = np.linspace(0, len(path) - 1, points).round().astype(int)
        keys.add(tuple(np.floor(path[idx] / cell).astype(int).reshape(-1).tolist()))
    return len(keys)


def coverage(run: Path, episodes: int, seed: int, tokens: bool, args: Any) -> dict[str, Any]:
    from unilab.runtime.policy import ActionQueue
    from unilab.runtime.torch_policy import NumpyPolicy

    task, policy = _task_and_policy(run, episodes, seed, rollout=True)
    numpy_policy = NumpyPolicy(policy)
    queue = ActionQueue(task.num_envs, task.action_dim, policy.cfg.n_act)

    def act(obs: dict[str, np.ndarray]) -> np.ndarray:
        if not tokens:
            obs = {**obs, "token": np.full(task.num_envs, -1, np.int64)}
        return queue.next(numpy_policy, obs)

    def on_end(ended: np.ndarray) -> None:
        queue.episodes_ended(ended)
        numpy_policy.episodes_ended(ended)

    torch.manual_seed(seed)
    out = _episodes(task, act, on_end)
    row: dict[str, Any] = {"success": float(out["success"].mean())}
    for cell in args.cells:
        found = distinct_paths(out["paths"], args.points, cell)
        row[f"paths_per_100@{cell:g}m"] = found * 100.0 / episodes
    return row


def deployment(
    run: Path, episodes: int, seed: int, token: int | None, hold: bool = True
) -> dict[str, Any]:
    """Deterministic chunks; token None: the selector if the model has one (its choice held
    for the episode, or made again at every chunk when not `hold`), else null."""
    task, policy = _task_and_policy(run, episodes, seed, rollout=False)
    executor = policy.executor(task.num_envs, seed=seed, hold_token=hold)
    first = np.full(task.num_envs, -1, np.int64)  # each env's held token, its first episode

    def act(obs: dict[str, np.ndarray]) -> np.ndarray:
        if token is not None:
            obs = {**obs, "token": np.full(task.num_envs, token, np.int64)}
        return executor(obs)

    def on_end(ended: np.ndarray) -> None:
        keep = ended & (first < 0)
        first[keep] = executor.held[keep]
        executor.reset(np.flatnonzero(ended))

    out = _episodes(task, act, on_end)
    row: dict[str, Any] = {"success": float(out["success"].mean())}
    chosen = first[first >= 0]
    if token is None and hold and chosen.size:  # what the selector chose, per episode
        shares = np.bincount(chosen, minlength=int(policy.cfg.n_tokens)) / chosen.size
        row["selector_token_share"] = [round(float(x), 3) for x in shares]
    return row


def ratios(rows: list[dict[str, Any]], cells: list[float]) -> dict[str, float]:
    """Means over seeds: coverage with / without tokens per cell; deployment success of the
    selector (if any) and of the null token over the best fixed token."""

    def mean(values: list[float]) -> float:
        return float(np.mean(values)) if values else float("nan")

    out: dict[str, float] = {}
    cov = [r for r in rows if r["measure"] == "coverage"]
    for cell in cells:
        key = f"paths_per_100@{cell:g}m"
        with_t = mean([r[key] for r in cov if r["tokens"]])
        without = mean([r[key] for r in cov if not r["tokens"]])
        if cov and without > 0:
            out[f"coverage_tokens_vs_null@{cell:g}m"] = with_t / without
    dep = [r for r in rows if r["measure"] == "deployment"]
    by: dict[str, list[float]] = {}
    for r in dep:
        by.setdefault(r["token"], []).append(r["success"])
    fixed = [mean(v) for k, v in by.items() if k.startswith("token ")]
    if fixed and max(fixed) > 0:
        best = max(fixed)
        out["null_vs_best_fixed_token"] = mean(by["null"]) / best
        if "selector" in by:
            out["selector_vs_best_fixed_token"] = mean(by["selector"]) / best
        if "selector per chunk" in by:
            out["selector_per_chunk_vs_best_fixed_token"] = mean(by["selector per chunk"]) / best
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="unilab bench tokens", description=__doc__)
    p.add_argument("run", type=Path, help="a bc_flow (algo.tokens=K) or flow_ppo run directory")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    p.add_argument(
        "--cells",
        default="0.05,0.1,0.2",
        help="grid cells of the path key (m), comma-separated: a coverage figure per cell",
    )
    p.add_argument("--points", type=int, default=4, help="instants per path key")
    p.add_argument("--skip-coverage", action="store_true")
    p.add_argument("--skip-deployment", action="store_true")
    p.add_argument("--out", default="bench/results/tokens.json")
    args = p.parse_args(argv)
    args.cells = [float(c) for c in args.cells.split(",") if c.strip()]
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    t0 = time.perf_counter()
    from unilab.export.run_policy import load_run_policy
    from unilab.policies.vla.policy import VLAPolicy

    actor = load_run_policy(args.run).actor
    if not isinstance(actor, VLAPolicy):
        raise SystemExit(f"{args.run} is not a VLA run (its actor is {type(actor).__name__})")
    k = int(actor.cfg.n_tokens)
    has_selector = actor.selector is not None
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        if not args.skip_coverage:
            for tokens in (True, False):
                r = coverage(args.run, args.episodes, seed, tokens, args)
                rows.append({"seed": seed, "measure": "coverage", "tokens": tokens, **r})
        if args.skip_deployment:
            continue
        choices: list[tuple[str, int | None, bool]] = [("null", -1, True)]
        choices += [(f"token {i}", i, True) for i in range(k)]
        if has_selector:
            choices += [("selector", None, True), ("selector per chunk", None, False)]
        for label, token, hold in choices:
            r = deployment(args.run, args.episodes, seed, token, hold)
            rows.append({"seed": seed, "measure": "deployment", "token": label, **r})
    cover = [f"paths_per_100@{c:g}m" for c in args.cells]
    print_table(
        rows, ["seed", "measure", "tokens", "token", *cover, "success", "selector_token_share"]
    )
    doc = {
        "benchmark": "tokens",
        "bench_command": "unilab bench tokens " + " ".join(argv or []),
        "ratios": ratios(rows, args.cells),
        "run": str(args.run),
        "machine": machine_info(),
        "episodes": args.episodes,
        "seeds": seeds,
        "cells_m": args.cells,
        "points": args.points,
        "n_tokens": k,
        "selector": has_selector,
        "coverage_protocol": ROLLOUT_NOTE,
        "rows": rows,
        "bench_wall_s": time.perf_counter() - t0,
    }
    print(f"wrote {write_json(args.out, doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
