"""Rollouts into episode stores, for the improvement loops (`unilab improve`, the world-model
loop): `record_rollouts` plays a run one episode per env (optionally each scene several
times) and records it, `append_episodes` moves episodes between stores of different
schemas, `store_frames` counts a store's frames by origin and by awr_flow sampling source,
`load_with_settings` loads a run to play with given inference settings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from unilab.algos.frame_advantages import SOURCES, frame_sources
from unilab.config.errors import ConfigError
from unilab.data.episode import EpisodeMeta

if TYPE_CHECKING:
    from unilab.deploy.policy_source import LoadedPolicy

ROLLOUT_ENVS = 100
"""Envs of one wave of rollouts (one episode each)."""
REPEAT_NOISE_STRIDE = 7919
"""Noise-seed offset between the tries of a scene (a prime: apart from the waves' seeds)."""


def check_repeats(episodes: int, repeats: int) -> None:
    """Tries per scene must be >= 1 and divide the episodes (a whole number of scenes)."""
    if repeats < 1 or episodes % repeats:
        raise ConfigError(
            f"--repeats={repeats}: needs a whole number of scenes, --episodes ({episodes}) a "
            "multiple of --repeats >= 1"
        )


def store_frames(store: Path) -> dict[str, Any]:
    """Frames of the store in total, by origin and by awr_flow sampling source, and its
    episodes."""
    from unilab.data.schema import ORIGINS
    from unilab.data.store import EpisodeStore

    with EpisodeStore.open(store, "r") as st:
        origin = st.read("origin").astype(np.int64)
        version = st.read("policy_version")
        intervention = st.read("is_intervention") if "is_intervention" in st.schema.fields else None
        episodes = len(st)
    by_origin = np.bincount(origin, minlength=len(ORIGINS))
    sources = frame_sources(origin, version, ORIGINS, is_intervention=intervention)
    by_source = np.bincount(sources, minlength=len(SOURCES))
    return {
        "total": int(origin.size),
        "episodes": int(episodes),
        "by_origin": {name: int(n) for name, n in zip(ORIGINS, by_origin, strict=True) if n},
        "by_source": {name: int(n) for name, n in zip(SOURCES, by_source, strict=True) if n},
    }


def _neutral(dtype: np.dtype[Any]) -> Any:
    """The value a store-only column gets on appended frames: False, -1 (signed ints: no
    mode / id), 0 (unsigned), 0.0."""
    if dtype.kind == "b":
        return False
    return -1 if dtype.kind == "i" else 0


def append_episodes(
    source: Path, target: Path, select: Callable[[EpisodeMeta], bool] | None = None
) -> int:
    """Append the episodes of store `source` (those whose metadata `select` accepts; all
    without it) to store `target`, metadata kept: fields `target` lacks are left out;
    `target`'s fields that `source` lacks get a neutral value (`_neutral`); a field both
    have with different shapes is an error. -> episodes added."""
    from unilab.data.schema import CORE_FIELDS
    from unilab.data.store import EpisodeStore

    with EpisodeStore.open(source, "r") as src, EpisodeStore.open(target, "a") as dst:
        have, want = src.schema.fields, dst.schema.fields
        wrong = [
            f"{n}: {have[n].shape} {have[n].dtype} vs {want[n].shape} {want[n].dtype}"
            for n in want
            if n in have and (have[n].shape != want[n].shape)
        ]
        if wrong:
            raise ValueError(f"{source} does not fit {target}: {'; '.join(wrong)}")
        fill = [n for n in want if n not in have and n not in CORE_FIELDS]
        episodes = []
        for i in range(len(src)):
            if select is not None and not select(src.meta(i)):
                continue
            frames = src.episode(i, [n for n in want if n in have])
            length = len(frames["reward"])
            for name in fill:
                spec = want[name]
                dtype = np.dtype(spec.dtype)
                frames[name] = np.full((length, *spec.shape), _neutral(dtype), dtype)
            episodes.append((frames, src.meta(i)))
        if episodes:
            dst.append_episodes(episodes)
    return len(episodes)


def load_with_settings(run: Path, settings: Mapping[str, Any] | None = None) -> LoadedPolicy:
    """`run`'s policy; with `settings` (`unilab tune-inference`'s choice: n_act, flow_steps,
    ...) it executes its chunks with them. A setting the policy cannot use is a
    ConfigError that says why (nothing is silently left out of a loop's rollouts)."""
    from unilab.deploy.policy_source import load_policy
    from unilab.deploy.tune_inference import TuneError, with_checked_settings

    policy = load_policy(run)
    if not settings:
        return policy
    try:
        return with_checked_settings(policy, settings)
    except TuneError as exc:
        raise ConfigError(f"inference settings {dict(settings)} for {run}: {exc}") from None


def record_rollouts(
    run: Path,
    store: Path,
    folder: Path,
    episodes: int,
    seed: int,
    takeover_after_s: float | None = None,
    takeover_on_error: bool = False,
    repeats: int = 1,
    inference_settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Roll out `run` (executing with `inference_settings` when given, `load_with_settings`)
    into `folder/rollouts.zarr` (with expert takeovers after
    `takeover_after_s` seconds when given, and at the policy's mistakes with
    `takeover_on_error`), append those episodes to `store`.

    The episodes run in waves of at most `ROLLOUT_ENVS` envs, one episode per env (wave w
    seeded `seed + w`): batched inference, and no bias toward short episodes (counting the
    first episodes to finish over-represents quick successes). With `repeats` R > 1,
    `episodes` / R scenes are each played R times: every wave is played R times with the
    same seed (the same starts) and another noise seed, and the recorder tags each episode
    with its scene, so awr_flow judges it against the other tries of the same scene."""
    check_repeats(episodes, repeats)
    from unilab.deploy.play import play
    from unilab.deploy.sim_task import configs_for_policy

    policy = load_with_settings(run, inference_settings)
    task_cfg, sim_cfg = configs_for_policy(
        policy.metadata.task_config, policy.metadata.sim_config, []
    )
    rollout_store = folder / "rollouts.zarr"
    played: list[dict[str, Any]] = []
    steps = 0
    scenes = episodes // repeats
    outcomes: dict[tuple[int, int], list[bool]] = {}
    """(wave, env slot) -> the policy's own outcome of each try of that scene."""
    for wave, start in enumerate(range(0, scenes, ROLLOUT_ENVS)):
        size = min(ROLLOUT_ENVS, scenes - start)
        for rep in range(repeats):
            name = "rollouts" if wave == 0 else f"rollouts_{wave}"
            result = play(
                policy,
                task_cfg,
                sim_cfg,
                folder,
                name if rep == 0 else f"{name}_try{rep}",
                episodes=size,
                num_envs=size,
                one_per_env=True,
                seed=seed + wave,
                noise_seed=seed + wave + REPEAT_NOISE_STRIDE * rep,
                video=False,
                rerun=False,
                record=rollout_store,
                takeover_after_s=takeover_after_s,
                takeover_on_error=takeover_on_error,
            )
            played += result.episodes
            steps += result.steps
            for e in result.episodes:
                if e["success"] is not None:
                    solved = bool(e["success"]) and not e["intervened"]
                    outcomes.setdefault((wave, int(e["env"])), []).append(solved)
    added = append_episodes(rollout_store, store)
    rated = [e for e in played if e["success"] is not None]
    own = [bool(e["success"]) and not e["intervened"] for e in rated]
    summary: dict[str, Any] = {
        "episodes": len(played),
        "recorded_episodes": added,
        "store": str(rollout_store),
        "success_rate": float(np.mean(own)) if rated else None,
        "steps": steps,  # batched steps of the plays (all envs step together)
        "env_steps": int(sum(int(e["length"]) for e in played)),
        "seed": seed,
        "repeats": repeats,
    }
    if repeats > 1:
        # Only a scene with both outcomes among its tries gives non-zero advantages.
        summary["scenes"] = scenes
        summary["mixed_scenes"] = sum(len(set(v)) > 1 for v in outcomes.values())
    if takeover_after_s is not None or takeover_on_error:
        taken = [e for e in rated if e["intervened"]]
        summary["takeover"] = {
            "after_s": takeover_after_s,
            "on_error": takeover_on_error,
            "episodes": len(taken),
            "rescued": sum(bool(e["success"]) for e in taken),
        }
    return summary
