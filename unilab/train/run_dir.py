"""Run directories: runs/<task>/<algo>/<timestamp>[-tag]/ with a fixed inner layout."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from unilab.config.compose import to_yaml
from unilab.config.schema import Config
from unilab.utils.atomic import atomic_write_text


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tb"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def export(self) -> Path:
        return self.path / "export"

    @property
    def media(self) -> Path:
        return self.path / "media"

    def make(self) -> RunDir:
        for sub in (self.path, self.checkpoints, self.export, self.media):
            sub.mkdir(parents=True, exist_ok=True)
        return self


def open_run_dir(cfg: Config) -> RunDir:
    """A fresh directory for a new run, or the resumed run's own directory; `config.yaml`
    is left to the caller (a resumed run rewrites it only once its checkpoint has loaded)."""
    if cfg.run.resume:
        run = RunDir(Path(cfg.run.resume)).make()
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"{stamp}-{cfg.run.tag}" if cfg.run.tag else stamp
        base = Path(cfg.run.out_dir) / cfg.task.name / cfg.algo.name
        base.mkdir(parents=True, exist_ok=True)
        n = 0
        while True:  # runs started in the same second get name, name.1, name.2, ...
            path = base / (f"{name}.{n}" if n else name)
            try:
                path.mkdir()  # atomic: two processes never both claim one name
                break
            except FileExistsError:
                n += 1
        run = RunDir(path).make()
    return run


def new_run_dir(cfg: Config) -> RunDir:
    """`open_run_dir` plus the resolved config written to `config.yaml`."""
    run = open_run_dir(cfg)
    atomic_write_text(run.config, to_yaml(cfg))
    return run
