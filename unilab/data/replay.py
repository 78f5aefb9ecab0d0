"""Replay one collected episode from its seed: the check that `unilab collect`'s
episodes are reproducible (same expert, same perturbation, same mode draw)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from unilab.config.schema import SimConfig, TaskConfig
from unilab.data.collect import PERTURBED_FIELD, store_schema
from unilab.runtime.fields import ring_field


def replay_episode(
    task: TaskConfig | str,
    seed: int,
    *,
    sim: SimConfig | None = None,
    action_noise: float = 0.0,
    mode_probs: Sequence[float] | None = None,
) -> dict[str, np.ndarray]:
    """Run the episode with this seed again (one env, the scripted expert, perturbed by
    `action_noise` as collected: the `action_noise` tag of the episode; `mode_probs` too, its
    `mode_probs` tag where it has one) and return its
    frames under the store's field names. Actions, proprioception, instruction and mode
    equal the collected episode's exactly; camera pixels too when it ran in the first env
    slot of its worker (in another tile of the shared framebuffer a few edge pixels round
    differently)."""
    from unilab.config.compose import compose
    from unilab.tasks.experts import make_expert
    from unilab.tasks.registry import make_task
    from unilab.tasks.tabletop import TabletopTask

    task_cfg = compose([f"task={task}"]).task if isinstance(task, str) else task
    env = make_task(task_cfg, num_envs=1, seed=seed, sim_cfg=sim)
    try:
        assert isinstance(env, TabletopTask)
        env.episode_seeder = lambda ids: np.full(len(ids), seed, dtype=np.int64)
        obs = env.reset()
        expert = make_expert(env, seed=seed, action_noise=action_noise, mode_probs=mode_probs)
        expert.reset(None, seeds=env.episode_seed)
        spec = env.observation_spec()
        _, source = store_schema(dict(spec), env.action_dim, perturbed=action_noise > 0)
        groups = {ring: g for g in spec if (ring := ring_field(g)) in source.values()}
        rows: dict[str, list[np.ndarray]] = {name: [] for name in source}
        for key in ("reward", "terminated", "truncated"):
            rows[key] = []
        while True:
            step = {ring_name: obs[g][0].copy() for ring_name, g in groups.items()}
            step["mode"] = expert.mode[0].astype(np.int32)
            action = expert.act()
            result = env.step(expert.perturb(action))
            step["action"] = action[0].copy()
            step[PERTURBED_FIELD] = expert.perturbed[0].copy()
            for name, ring_name in source.items():
                rows[name].append(step[ring_name])
            rows["reward"].append(result.reward[0])
            rows["terminated"].append(result.terminated[0])
            rows["truncated"].append(result.truncated[0])
            if result.terminated[0] or result.truncated[0]:
                break
            obs = result.obs
        return {name: np.stack(values) for name, values in rows.items()}
    finally:
        env.close()
