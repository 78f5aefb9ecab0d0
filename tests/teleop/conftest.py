"""Fixtures shared by the HIL tests: keys (an allowlist with alice and monitor, not the
intruder) and a demo ONNX policy for arm_reach."""

from __future__ import annotations

from pathlib import Path

import pytest
from hil_fixtures import Keys

from unilab.teleop.session_tools import make_keyset


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keyset(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="session")
def demo_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from unilab.teleop.demo_policy import write_demo_policy

    return write_demo_policy("arm_reach", tmp_path_factory.mktemp("policy") / "policy.onnx")
