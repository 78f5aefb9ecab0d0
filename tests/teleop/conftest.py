"""Fixtures shared by the HIL tests: keys (an allowlist with alice and monitor, not the
intruder) and a demo ONNX policy for arm_reach."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hil_fixtures import Keys

from unilab.teleop.keys import generate_keypair


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    root = tmp_path_factory.mktemp("keys")
    for name in ("robot", "alice", "monitor", "intruder"):
        generate_keypair(root, name)
    allow = root / "allowed"
    allow.mkdir()
    for name in ("alice", "monitor"):  # the intruder's key is not in the allowlist
        shutil.copy(root / "public" / f"{name}.key", allow / f"{name}.key")
    return Keys(root, allow)


@pytest.fixture(scope="session")
def demo_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from unilab.teleop.demo_policy import write_demo_policy

    return write_demo_policy("arm_reach", tmp_path_factory.mktemp("policy") / "policy.onnx")
