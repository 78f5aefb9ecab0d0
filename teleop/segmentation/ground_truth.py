"""Mixed-quality sim episodes with known segments, for measuring the segmentation critic.

The `arm_pick_place` scripted expert (one mode: the left bowl, small wrist turn; no
distractors; state observations) plays the policy. Into its episodes the generator injects
scripted spans:

- idle: the arm holds still (zero motion, gripper held) for a while;
- failure-inducing: the hand moves away in a random direction with the gripper open, so a
  held cube drops and the arm ends up far from where it should be;
- recovery: right after a failure the expert takes over as a human operator would
  (`is_intervention=True`, origin `human`), then hands back to the policy (origin `sim`);
  some failures are never recovered (the arm idles until the time limit).

Every frame's true label goes into the `true_segment` column (SEGMENTS codes), a
ground-truth column policies and the critic never read; the `segment` column stays `none`.
Episodes go into a real episode store through `EpisodeStore.append_episodes`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from unilab.data.episode import EpisodeMeta
from unilab.data.schema import SEGMENTS, FieldSpec, StoreSchema
from unilab.data.store import EpisodeStore
from unilab.tasks.tabletop import TabletopTask

TASK = "arm_pick_place"
TRUE_FIELD = "true_segment"
"""Ground-truth label column (uint8 SEGMENTS codes): what the benchmark scores against."""
TASK_OVERRIDES = (
    f"task={TASK}",
    "task.cameras=[]",
    "task.state_policy=true",
    "task.num_distractors=0",
    "task.episode_length_s=15.0",
)
PROGRESS, IDLE, FAILURE, RECOVERY = (SEGMENTS.index(s) for s in SEGMENTS[1:])


@dataclass
class MixConfig:
    """Which spans an episode gets, drawn per episode."""

    clean_fraction: float = 0.3
    """Episodes the expert runs alone from start to end (demonstrations)."""
    idle_probability: float = 0.7
    failure_probability: float = 0.6
    unrecovered_fraction: float = 0.25
    """Of the failures, the fraction nobody recovers."""
    idle_steps: tuple[int, int] = (10, 30)
    failure_steps: tuple[int, int] = (8, 16)
    recovery_steps: tuple[int, int] = (25, 50)
    """Intervention length before handing back to the policy."""
    span_start: tuple[int, int] = (5, 55)
    """Frame range in which an injected span starts."""


def task_config() -> Any:
    from unilab.config.compose import compose

    return compose(list(TASK_OVERRIDES)).task


def schema_for(obs_dim: int, action_dim: int) -> StoreSchema:
    return StoreSchema.build(
        obs={"policy": obs_dim},
        action=action_dim,
        extra={TRUE_FIELD: FieldSpec((), "uint8")},
    )


def _draw_plan(rng: np.random.Generator, mix: MixConfig) -> dict[str, Any]:
    """One episode's schedule: span starts/lengths in frames (-1: no such span)."""
    plan: dict[str, Any] = {"kind": "clean", "idle": (-1, 0), "failure": (-1, 0), "recover": 0}
    if rng.random() < mix.clean_fraction:
        return plan
    has_idle = rng.random() < mix.idle_probability
    has_fail = rng.random() < mix.failure_probability
    if not (has_idle or has_fail):
        has_idle = True
    t = int(rng.integers(*mix.span_start))
    order = ["idle", "failure"] if rng.random() < 0.5 else ["failure", "idle"]
    for span in order:
        if span == "idle" and has_idle:
            n = int(rng.integers(*mix.idle_steps))
            plan["idle"] = (t, n)
            t += n + int(rng.integers(5, 20))
        if span == "failure" and has_fail:
            n = int(rng.integers(*mix.failure_steps))
            plan["failure"] = (t, n)
            unrecovered = rng.random() < mix.unrecovered_fraction
            plan["recover"] = -1 if unrecovered else int(rng.integers(*mix.recovery_steps))
            t += n + max(plan["recover"], 0) + int(rng.integers(5, 20))
    plan["kind"] = "+".join(s for s in order if plan[s][0] >= 0)
    if plan["recover"] == -1:
        plan["kind"] += "+unrecovered"
    plan["direction"] = rng.normal(size=2)
    return plan


def _phase_label(plan: dict[str, Any], t: int) -> tuple[int, bool]:
    """(true label, human in control) of frame t under `plan`."""
    a, n = plan["idle"]
    if a >= 0 and a <= t < a + n:
        return IDLE, False
    f, m = plan["failure"]
    if f >= 0 and f <= t < f + m:
        return FAILURE, False
    if f >= 0 and t >= f + m:
        r = plan["recover"]
        if r < 0:
            return IDLE, False  # nobody comes: the arm waits until the time limit
        if t < f + m + r:
            return RECOVERY, True
    return PROGRESS, False


def generate(
    path: str | os.PathLike[str],
    episodes: int,
    *,
    seed: int = 0,
    mix: MixConfig | None = None,
    num_envs: int = 16,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write `episodes` mixed-quality episodes to a new store at `path`; a summary back."""
    from unilab.tasks.experts import make_expert
    from unilab.tasks.registry import make_task

    mix = mix or MixConfig()
    rng = np.random.default_rng(seed)
    cfg = task_config()
    task = make_task(cfg, num_envs=num_envs, seed=seed)
    assert isinstance(task, TabletopTask)
    expert = make_expert(task, seed=seed)
    n = num_envs
    try:
        obs = task.reset()
        expert.reset(None, modes=0)
        obs_dim, action_dim = obs["policy"].shape[1], 5
        store = EpisodeStore.create(path, schema_for(obs_dim, action_dim), overwrite=overwrite)
        plans = [_draw_plan(rng, mix) for _ in range(n)]
        t = np.zeros(n, dtype=np.int64)
        grip = np.ones(n, dtype=np.float32)
        bufs: list[dict[str, list[Any]]] = [_empty() for _ in range(n)]
        done_eps, counts = 0, {"success": 0, "frames": 0}
        pending: list[tuple[dict[str, Any], EpisodeMeta]] = []
        while done_eps < episodes:
            labels = np.empty(n, dtype=np.uint8)
            human = np.zeros(n, dtype=bool)
            for e in range(n):
                labels[e], human[e] = _phase_label(plans[e], int(t[e]))
            phase, timer = expert.phase.copy(), expert.timer.copy()
            action = expert.act()
            scripted = (labels == IDLE) | (labels == FAILURE)
            # The expert's phase machine must not run on while it is not in control.
            expert.phase[scripted], expert.timer[scripted] = phase[scripted], timer[scripted]
            idle = labels == IDLE
            action[idle, :4] = 0.0
            action[idle, 4] = grip[idle]
            for e in np.flatnonzero(labels == FAILURE):
                d = plans[e]["direction"]
                away = np.array([*(d / (np.linalg.norm(d) + 1e-9)), 0.6])
                action[e, :3], action[e, 3], action[e, 4] = away / np.abs(away).max(), 0.0, 1.0
            grip[:] = action[:, 4]
            result = task.step(action)
            for e in range(n):
                b = bufs[e]
                b["obs/policy"].append(obs["policy"][e])
                b["action"].append(action[e])
                b["reward"].append(result.reward[e])
                b["true"].append(labels[e])
                b["human"].append(human[e])
            obs = result.obs
            t += 1
            ended = np.flatnonzero(result.terminated | result.truncated)
            for e in ended.tolist():
                success = bool(result.extras["success"][e] > 0.5)
                if done_eps < episodes:
                    pending.append(
                        _episode(bufs[e], bool(result.terminated[e]), success, plans[e], seed)
                    )
                    done_eps += 1
                    counts["success"] += success
                    counts["frames"] += len(bufs[e]["action"])
                bufs[e], plans[e], t[e], grip[e] = _empty(), _draw_plan(rng, mix), 0, 1.0
            if ended.size:
                expert.reset(ended, modes=0)
            if len(pending) >= 32:
                store.append_episodes(pending)
                pending = []
        if pending:
            store.append_episodes(pending)
        store.close()
    finally:
        task.close()
    return {"episodes": episodes, **counts}


def _empty() -> dict[str, list[Any]]:
    return {k: [] for k in ("obs/policy", "action", "reward", "true", "human")}


def _episode(
    b: dict[str, list[Any]], terminated: bool, success: bool, plan: dict[str, Any], seed: int
) -> tuple[dict[str, Any], EpisodeMeta]:
    k = len(b["action"])
    human = np.asarray(b["human"], dtype=bool)
    end = np.zeros(k, dtype=bool)
    frames = {
        "obs/policy": np.stack(b["obs/policy"]),
        "action": np.stack(b["action"]),
        "reward": np.asarray(b["reward"], dtype=np.float32),
        "terminated": end.copy(),
        "truncated": end.copy(),
        "origin": np.where(human, "human", "sim"),
        "is_intervention": human,
        TRUE_FIELD: np.asarray(b["true"], dtype=np.uint8),
    }
    frames["terminated" if terminated else "truncated"][-1] = True
    tags = {"kind": plan["kind"], "generator_seed": seed}
    meta = EpisodeMeta(task=TASK, success=success, fps=20.0, robot="arm", tags=tags)
    return frames, meta
