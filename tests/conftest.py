"""Test-wide setup: offscreen rendering through EGL (MuJoCo picks its GL backend when it is
first imported, so this must run before any test module imports mujoco)."""

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture
def torch_one_thread() -> Iterator[None]:
    """One intra-op torch thread for the test (opt in with
    `pytestmark = pytest.mark.usefixtures("torch_one_thread")`): the models under test are
    tiny, and on a shared 2-core box two OpenMP threads spin against other processes
    (measured 30x slower under load)."""
    import torch  # here, so test modules without torch never import it

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
