"""One trained cart-pole policy (run directory and its export), shared by the deploy tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from run_helpers import trained_cartpole_run

from unilab.export.run_export import export_run


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    run = trained_cartpole_run(tmp_path_factory.mktemp("runs"), iterations=45)
    export_run(run.path)
    return run.path


@pytest.fixture(scope="session")
def trained_onnx(trained_run: Path) -> Path:
    return trained_run / "export" / "policy.onnx"
