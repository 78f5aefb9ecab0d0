from __future__ import annotations

from pathlib import Path

import pytest
from store_helpers import make_episode, make_meta, small_schema

from unilab.data import EpisodeStore


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "episodes.zarr"


@pytest.fixture
def filled_store(store_path: Path) -> Path:
    """A closed store holding episodes 0..9 of `make_episode`, written in four commits."""
    with EpisodeStore.create(store_path, small_schema()) as store:
        for batch in ([0], [1, 2], [3, 4, 5], [6, 7, 8, 9]):
            store.append_episodes([(make_episode(k), make_meta(k)) for k in batch])
    return store_path
