"""Fixtures for the unilab.sim tests."""

from __future__ import annotations

import mujoco
import pytest
from sim_test_models import CHAIN_XML, FREE_XML, free_model_with_movable_coms


@pytest.fixture(scope="session")
def free_model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(FREE_XML)


@pytest.fixture(scope="session")
def chain_model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(CHAIN_XML)


@pytest.fixture(scope="session")
def free_model_movable_com() -> mujoco.MjModel:
    return free_model_with_movable_coms()
