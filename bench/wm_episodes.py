"""Episodes with known outcomes and the runs that the world-model benches share
(`unilab bench wm_filter`, `wm_failures`, `wm_gain`): the scripted expert recorded with a
per-episode offset (mostly failures) or solved, quiet training runs, open-loop replay of
action sequences in the simulator from a seed's start state, and how well a filter finds
the rollouts whose predicted outcome is wrong."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unilab.config.compose import compose
from unilab.data import EpisodeStore
from unilab.data.episode import EpisodeMeta
from unilab.tasks.base import IMAGE_PREFIX, INSTRUCTION
from unilab.tasks.experts import make_expert
from unilab.tasks.registry import make_task
from unilab.workflows.train import train

TASK_OVERRIDES = ["task.cameras=[front]", "task.image_size=32"]
WM_OVERRIDES = ["algo.channels=[16,32,64]", "algo.batch_size=32", "runtime.learner_threads=1"]
VLA_OVERRIDES = [
    "algo.batch_size=32",
    "algo.model.width=64",
    "algo.model.heads=2",
    "algo.model.image_channels=[16,32]",
    "algo.model.image_tokens_side=4",
    "algo.model.horizon=8",
    "algo.model.n_act=4",
    "algo.model.num_steps=4",
    "algo.model.prefix_layers=1",
    "algo.model.expert_layers=2",
    "runtime.learner_threads=1",
]
MAX_OFFSET = 0.3
"""Failure episodes: the expert's motion axes get a constant offset of std U(0, MAX_OFFSET)
(0.3 on arm_move_side: no episode solved; 0: every one)."""


def task_env(task: str, overrides: Sequence[str], envs: int, seed: int) -> Any:
    cfg = compose([f"task={task}", *overrides])
    return make_task(cfg.task, num_envs=envs, seed=seed, sim_cfg=cfg.sim)


def record_episodes(
    store: Path,
    task: str,
    seeds: Sequence[int],
    *,
    overrides: Sequence[str] = TASK_OVERRIDES,
    max_offset: float = 0.0,
    solved_only: bool = False,
) -> dict[str, Any]:
    """One episode per seed (the task's start state and the expert's draws from that seed),
    the scripted expert driving, plus a constant offset of std U(0, max_offset) per episode
    on its motion axes; the executed actions are recorded. Appended to `store` (created if
    missing) with `seed` and `success` in the metadata. -> episodes, successes."""
    seed_of = np.asarray(seeds, np.int64)
    n = len(seed_of)
    env = task_env(task, overrides, n, int(seed_of[0]))
    starting = [True]
    env.episode_seeder = lambda ids: seed_of[ids] if starting[0] else seed_of[ids] + 10**7
    obs = env.reset()
    starting[0] = False
    expert = make_expert(env, seed=int(seed_of[0]))
    expert.reset(None, seeds=env.episode_seed)
    rng = np.random.default_rng(int(seed_of[0]) + 1)
    offset = rng.standard_normal((n, env.action_dim)) * rng.uniform(0, max_offset, (n, 1))
    offset[:, -1] = 0.0  # the gripper command stays the expert's
    texts = env.instruction_text(np.arange(n))
    cams = [k for k in obs if k.startswith(IMAGE_PREFIX)]
    rows: dict[str, list[np.ndarray]] = {}
    done, success, length = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, np.int64)
    while not done.all():
        action = np.clip(expert.act() + offset, -1.0, 1.0).astype(np.float32)
        out = env.step(action)
        frame = {
            "obs/policy": obs["policy"],
            "obs/instruction": obs[INSTRUCTION],
            "action": action,
            "reward": out.reward,
            "terminated": out.terminated,
            "truncated": out.truncated,
            **{k: obs[k] for k in cams},
        }
        for k, v in frame.items():
            rows.setdefault(k, []).append(np.array(v, copy=True))
        ended = (out.terminated | out.truncated) & ~done
        success[ended] = out.extras["success"][ended] > 0.5
        length[ended] = len(rows["action"])
        done |= ended
        obs = out.obs
    keep = success if solved_only else np.ones(n, bool)
    episodes = []
    for e in np.flatnonzero(keep):
        ep: dict[str, Any] = {k: np.stack([r[e] for r in v[: length[e]]]) for k, v in rows.items()}
        ep["origin"] = "sim"
        meta = EpisodeMeta(
            task=task,
            language_instruction=texts[e],
            success=bool(success[e]),
            seed=int(seed_of[e]),
            robot=env.robot.name,
            fps=1.0 / env.control_dt,
            tags={"offset_std": float(np.linalg.norm(offset[e]))},
        )
        episodes.append((ep, meta))
    spec = env.observation_spec()
    env.close()
    if not Path(store).exists():
        from unilab.data import FieldSpec, StoreSchema

        schema = StoreSchema.build(
            obs={"policy": spec["policy"].shape},
            action=len(offset[0]),
            images={k.removeprefix(IMAGE_PREFIX): tuple(spec[k].shape) for k in cams},
            extra={"obs/instruction": FieldSpec(tuple(spec[INSTRUCTION].shape), "int64")},
        )
        EpisodeStore.create(store, schema).close()
    with EpisodeStore.open(store, "a") as st:
        st.append_episodes(episodes)
    return {"episodes": len(episodes), "successes": int(success[keep].sum())}


def train_run(task: str, tokens: Sequence[str], out: Path, seed: int = 0) -> Path:
    """A training run of `tokens` (world model or VLA), quiet, no eval/export/play."""
    cfg = compose(
        [
            f"task={task}",
            *tokens,
            "eval.every=0",
            "viz.rerun=false",
            "run.export=false",
            "run.quiet=true",
            "run.play_episodes=0",
            "logging.tensorboard=false",
            f"run.seed={seed}",
            f"run.out_dir={out}",
        ]
    )
    run = train(cfg)
    assert run is not None
    return run.path


def replay_in_sim(
    task: str,
    seeds: Sequence[int],
    actions: np.ndarray,
    length: np.ndarray,
    overrides: Sequence[str],
) -> tuple[np.ndarray, np.ndarray]:
    """Reset one env per seed (the start state of that seed's episode), step `actions`
    (B, T, A) open loop for each env's `length` steps or until its episode ends.
    -> (B,) success, (B,) proprioception of the start state (to check it is the stored one)."""
    seed_of = np.asarray(seeds, np.int64)
    n = len(seed_of)
    env = task_env(task, overrides, n, int(seed_of[0]))
    env.episode_seeder = lambda ids: seed_of[ids]
    obs = env.reset()
    start = np.array(obs["policy"], copy=True)
    done, success = np.zeros(n, bool), np.zeros(n, bool)
    for t in range(int(length.max())):
        out = env.step(actions[:, t].astype(np.float32))
        live = ~done & (t < length)
        ended = (out.terminated | out.truncated) & live
        success[ended] = out.extras["success"][ended] > 0.5
        done |= ended | (t + 1 >= length)
    env.close()
    return success, start


def filter_quality(removed: np.ndarray, bad: np.ndarray) -> dict[str, Any]:
    """Precision and recall of `removed` at finding `bad` rollouts."""
    hit = int((removed & bad).sum())
    return {
        "removed": int(removed.sum()),
        "bad": int(bad.sum()),
        "removed_and_bad": hit,
        "precision": hit / removed.sum() if removed.any() else None,
        "recall": hit / bad.sum() if bad.any() else None,
        "bad_rate_kept": float(bad[~removed].mean()) if (~removed).any() else None,
        "bad_rate_all": float(bad.mean()),
    }


def roc_auc(score: np.ndarray, bad: np.ndarray) -> float | None:
    """P(score of a bad rollout > score of a good one), ties half (0.5: chance)."""
    pos, neg = score[bad], score[~bad]
    if not len(pos) or not len(neg):
        return None
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def kept_over_all(q: dict[str, Any]) -> float | None:
    if q["bad_rate_kept"] is None or not q["bad_rate_all"]:
        return None
    return float(q["bad_rate_kept"] / q["bad_rate_all"])
