"""`unilab train` as a library function: the `Runner` with every hook the config asks for.

    from unilab.config import compose
    from unilab.workflows.train import train
    run = train(compose(["task=arm_reach", "eval.every=20"]))

Hooks, in order: mid-run evaluation (`eval.every`), episode recording
(`logging.record_store`), Rerun recordings (`viz.rerun`), then `hooks` given here, and last
export + play (`run.export`, `run.play_episodes`) once the run has ended.

Offline algorithms (bc_flow, bc_mse) learn from `data.store`, opened here as a
`FrameDataset` (`unilab.workflows.offline_data`) and handed to the Runner.
"""

from __future__ import annotations

from collections.abc import Iterable

from unilab.config.errors import ConfigError
from unilab.config.schema import Config
from unilab.train.distributed import env_world_size
from unilab.train.follower import train_distributed
from unilab.train.hooks import TrainHook
from unilab.train.run_dir import RunDir
from unilab.train.runner import Runner
from unilab.train.session import train_hooks
from unilab.workflows.hooks import EpisodeRecordHook, ExportPlayHook
from unilab.workflows.offline_data import open_frames


def standard_hooks(cfg: Config, extra: Iterable[TrainHook] = ()) -> list[TrainHook]:
    policy = _learns_policy(cfg)
    if not policy and (cfg.eval.every or cfg.viz.rerun):
        raise ConfigError(
            f"algo={cfg.algo.name} learns a world model, not a policy: it has nothing to "
            "evaluate in the sim or record in Rerun during training; set eval.every=0 and "
            "viz.rerun=false (`unilab wm train` does), then score it with `unilab wm eval`"
        )
    hooks = train_hooks(cfg)
    if cfg.logging.record_store and _offline(cfg):
        raise ConfigError(
            f"logging.record_store records training rollouts; algo={cfg.algo.name} learns "
            "offline from data.store and makes none (record evaluations with `unilab play "
            "RUN record=STORE`)"
        )
    if cfg.logging.record_store:
        hooks.append(
            EpisodeRecordHook(
                cfg.logging.record_store, cfg.logging.record_every, cfg.logging.record_max_envs
            )
        )
    if cfg.viz.rerun:
        from unilab.viz.training_recorder import TrainingRecorder

        try:
            hooks.append(
                TrainingRecorder(
                    every=cfg.viz.every, steps=cfg.viz.steps, num_envs=cfg.viz.num_envs
                )
            )
        except ValueError as exc:
            raise ConfigError(f"viz section: {exc}") from None
    hooks.extend(extra)
    if cfg.run.export and policy:  # a world model's product is its checkpoint
        hooks.append(ExportPlayHook(cfg.run.play_episodes))
    return hooks


def _learns_policy(cfg: Config) -> bool:
    from unilab.algos.registry import ALGORITHMS

    return bool(getattr(ALGORITHMS.get(cfg.algo.name).algo_cls, "learns_policy", True))


def _offline(cfg: Config) -> bool:
    from unilab.algos.registry import ALGORITHMS

    return bool(getattr(ALGORITHMS.get(cfg.algo.name).algo_cls, "offline", False))


def train(cfg: Config, hooks: Iterable[TrainHook] = ()) -> RunDir | None:
    """Train, record, export and play as `cfg` says; returns the run directory (None on a
    learner rank other than 0 under torchrun: `unilab.train.follower`).

    A stop signal ends it with SystemExit(128 + signal) after the final checkpoint and
    summary; a failed export or play with SystemExit(1) (the checkpoint is kept).
    """
    if env_world_size() > 1:  # under torchrun: rank 0 runs the hooks, the others follow
        if _offline(cfg):
            raise ConfigError(
                f"algo={cfg.algo.name} trains offline in one process; torchrun data-parallel "
                "learning covers ppo and appo"
            )
        got = train_distributed(cfg, standard_hooks(cfg, hooks))
        if got is None:
            return None
        result = got
    else:
        all_hooks = standard_hooks(cfg, hooks)
        frames = open_frames(cfg)
        try:
            result = Runner(cfg, all_hooks, frames=frames).learn()
        finally:
            if frames is not None:
                frames.close()
    if result.exit_code:
        raise SystemExit(result.exit_code)
    if result.problems:
        raise SystemExit(1)
    return result.run
