"""bench tokens: the coverage key (paths snapped to a grid at a few instants) and the ratios
it reports."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.bench.tokens import distinct_paths, ratios


def test_distinct_paths_snap_to_the_grid_at_the_chosen_instants() -> None:
    t = np.linspace(0, 1, 50)[:, None]
    left = np.hstack([t, 0.3 * np.sin(np.pi * t), 0.1 + 0 * t])
    right = left * np.array([1.0, -1.0, 1.0])
    wobble = left + 0.01  # within the same 10 cm cells as `left`
    assert distinct_paths([left, right, wobble], points=4, cell=0.1) == 2
    assert distinct_paths([left, wobble], points=4, cell=0.001) == 2


def test_ratios_average_over_seeds() -> None:
    rows = [
        {"measure": "coverage", "tokens": True, "paths_per_100@0.1m": 40.0},
        {"measure": "coverage", "tokens": False, "paths_per_100@0.1m": 20.0},
        {"measure": "deployment", "token": "null", "success": 0.4},
        {"measure": "deployment", "token": "token 0", "success": 0.5},
        {"measure": "deployment", "token": "token 1", "success": 0.3},
        {"measure": "deployment", "token": "selector", "success": 0.6},
        {"measure": "deployment", "token": "selector per chunk", "success": 0.35},
    ]
    out = ratios(rows, [0.1])
    assert out["coverage_tokens_vs_null@0.1m"] == pytest.approx(2.0)
    assert out["null_vs_best_fixed_token"] == pytest.approx(0.8)
    assert out["selector_vs_best_fixed_token"] == pytest.approx(1.2)
    assert out["selector_per_chunk_vs_best_fixed_token"] == pytest.approx(0.7)
