"""Safety filter and watchdog in isolation."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.teleop.protocol import ProtocolError
from unilab.teleop.safety import SafetyFilter, Watchdog


def test_filter_rejects_and_holds() -> None:
    f = SafetyFilter(np.array([-1.0, -2.0]), np.array([1.0, 2.0]), np.array([0.1, 0.5]))
    assert np.array_equal(f.check(np.array([0.05, 0.4])), np.array([0.05, 0.4], np.float32))
    for bad, why in (
        (np.array([np.nan, 0.4]), "not_finite"),
        (np.array([0.05, np.inf]), "not_finite"),
        (np.array([1.5, 0.4]), "out_of_range"),
        (np.array([0.2, 0.4]), "too_fast"),
        (np.array([0.05]), "shape"),
    ):
        with pytest.raises(ProtocolError) as info:
            f.check(bad)
        assert info.value.reason == why
        np.testing.assert_array_equal(f.target, np.array([0.05, 0.4], np.float32))
    assert dict(f.rejects) == {"not_finite": 2, "out_of_range": 1, "too_fast": 1, "shape": 1}
    f.reseat(np.array([5.0, -5.0]))
    np.testing.assert_array_equal(f.target, np.array([1.0, -2.0], np.float32))
    with pytest.raises(ValueError):
        SafetyFilter(np.array([1.0]), np.array([0.0]), np.array([0.1]))


def test_watchdog() -> None:
    w = Watchdog(0.02, 3)
    assert not w.expired(100.0)
    w.feed(10.0)
    assert not w.expired(10.059) and w.expired(10.06)
    w.disarm()
    assert not w.armed and not w.expired(1e9)
