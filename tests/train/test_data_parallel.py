"""Two gloo learner processes under torchrun give one process's parameters on the combined
batch (within float tolerance) after several PPO updates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from unilab.train.distributed import SINGLE_WORLD

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import dp_equivalence_worker as worker  # noqa: E402

UPDATES = 4


def test_two_gloo_ranks_match_one_process_on_the_combined_batch(tmp_path: Path) -> None:
    out = tmp_path / "rank0.npz"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            str(HERE / "dp_equivalence_worker.py"), str(out), str(UPDATES),
        ],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = worker.run(SINGLE_WORLD, UPDATES)
    with np.load(out) as got:
        assert set(got.files) == set(reference)
        for name, value in reference.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    # the updates moved the parameters (a no-op learner would match trivially)
    torch_init = worker.run(SINGLE_WORLD, 0)
    moved = max(float(np.abs(reference[k] - torch_init[k]).max()) for k in reference)
    assert moved > 1e-3


def test_a_rank_shard_maps_combined_indices_to_its_own_rows() -> None:
    import torch

    from unilab.algos.data_parallel import TorchDataParallel

    dp = TorchDataParallel.__new__(TorchDataParallel)  # index arithmetic only: no group
    dp.rank, dp.world_size = 1, 2
    # combined (T=2, 4 envs): rank 1 holds envs 2, 3 -> local (2, 2)
    # combined index 7 = (step 1, env 3) -> local row 3; 1 = env 1 (rank 0's); 2 -> row 0
    combined = torch.tensor([7, 1, 2])
    assert dp.local_indices(combined, 2, 2).tolist() == [3, 0]
    with pytest.raises(RuntimeError, match="not initialised"):
        TorchDataParallel(0, 2)
