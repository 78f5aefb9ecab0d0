"""`train(cfg)`: a `Runner` with the train-level hooks the config asks for.

Stop signals end the call with SystemExit(128 + signal), as the `unilab train` command does.
Recording (`logging.record_store`), Rerun (`viz.rerun`) and export/play (`run.export`) are
tool hooks of higher layers: `unilab.workflows.train` adds them.
"""

from __future__ import annotations

from collections.abc import Iterable

from unilab.config.errors import ConfigError
from unilab.config.schema import Config
from unilab.train.eval_hook import EvalHook
from unilab.train.hooks import TrainHook
from unilab.train.run_dir import RunDir
from unilab.train.runner import Runner


def train_hooks(cfg: Config) -> list[TrainHook]:
    """The train-level hooks `cfg` asks for: mid-run evaluation (`eval.every`)."""
    hooks: list[TrainHook] = []
    if cfg.eval.every:
        try:
            hooks.append(EvalHook(cfg.eval.every, cfg.eval.episodes, cfg.eval.seed))
        except ValueError as exc:
            raise ConfigError(f"eval section: {exc}") from None
    return hooks


def train(cfg: Config, hooks: Iterable[TrainHook] = ()) -> RunDir:
    """Train with `cfg` (plus `hooks`); returns the run directory."""
    result = Runner(cfg, [*train_hooks(cfg), *hooks]).learn()
    if result.exit_code:
        raise SystemExit(result.exit_code)
    if result.problems:
        raise SystemExit(1)
    return result.run
