"""The frames an offline algorithm learns from: `data.store` opened as a `FrameDataset`.

It sits here, above the training loop, because the Runner (train layer) does not import
the data tools: `unilab.workflows.train` opens the store and hands the frames to the
Runner, which checks them against the policy's inputs before anything is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unilab.algos.registry import ALGORITHMS
from unilab.config.errors import ConfigError
from unilab.config.schema import Config


def open_frames(cfg: Config) -> Any:
    """`cfg.data.store` as a `FrameDataset` cut the way cfg's offline algorithm wants it
    (action chunks of H), or None for algorithms that learn from rollouts (and when no
    store is set: the Runner then says what to set). Unreadable stores are a ConfigError."""
    algo_cls = ALGORITHMS.get(cfg.algo.name).algo_cls
    store = cfg.data.store
    if not getattr(algo_cls, "offline", False) or not store:
        return None
    from unilab.data.dataset import FrameDataset
    from unilab.data.errors import EpisodeStoreError

    path = Path(store)
    if not path.exists():
        raise ConfigError(
            f"data.store={store}: no such episode store (a directory written by "
            "unilab.data's EpisodeWriter, `unilab play ... record=` or `unilab data "
            "import-lerobot`)"
        )
    frame_options = getattr(algo_cls, "frame_options", None)
    options: dict[str, Any] = frame_options(cfg.algo) if callable(frame_options) else {}
    options.setdefault("image_cache_bytes", cfg.data.image_cache_mib * 2**20)
    try:
        return FrameDataset(path, **options)
    except (EpisodeStoreError, KeyError, OSError) as exc:
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        raise ConfigError(
            f"data.store={store} cannot be read as an episode store: {text}"
        ) from None
