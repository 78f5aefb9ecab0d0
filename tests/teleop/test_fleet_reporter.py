"""A robot host's fleet reports keep their rate on a jittery control loop."""

from __future__ import annotations

import numpy as np

from unilab.teleop.fleet.reporter import _next_due


def test_status_rate_holds_on_jittery_ticks() -> None:
    rng = np.random.default_rng(0)
    now, due, sent = 0.0, -1e9, 0
    for _ in range(5000):  # 50 Hz ticks, up to 8 ms late: 100 s
        now += 0.02 + rng.uniform(0, 0.008) - 0.004
        if now >= due:
            due = _next_due(due, 0.1, now)
            sent += 1
    assert abs(sent / now - 10.0) < 0.1


def test_after_a_long_stall_the_grid_starts_afresh() -> None:
    due = _next_due(1.0, 0.1, 1.05)
    assert due == 1.1
    assert _next_due(1.0, 0.1, 9.0) == 9.1  # no burst of catch-up reports
