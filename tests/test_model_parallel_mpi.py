"""Tensor parallelism and the DP x PP x TP grid across real MPI processes: the transformer
trains as one process does (float64, 1e-10), and the split block does one allreduce each way."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from test_parallel_grid import train_on_grid
from test_tensor_parallel import reference, split_rank, train_transformer

import minidist as md

MPIEXEC = Path(sys.executable).parent / "mpiexec"
pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", ["mlp", "attention"])
def test_a_split_block_on_two_processes_equals_the_whole_with_one_allreduce_each_way(block):
    y, x_grad, _ = reference(block)
    for out, grad, _, (forward, backward, one) in md.launch(split_rank, 2, args=(block,),
                                                            backend="mpi", timeout=100):
        np.testing.assert_allclose(out, y, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(grad, x_grad, rtol=1e-10, atol=1e-12)
        assert forward == backward == one


@pytest.mark.timeout(120)
def test_a_tensor_parallel_transformer_on_two_processes_trains_as_one():
    one = train_transformer(md.comm.LocalCluster(1).communicators()[0], 6)
    for losses in md.launch(train_transformer, 2, args=(6,), backend="mpi", timeout=100):
        np.testing.assert_allclose(losses, one, rtol=1e-10)
    assert one[-1] < one[0]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("shape", [(2, 2, 1), (2, 1, 2)])
def test_dp_x_pp_or_tp_on_four_processes_trains_as_one(shape):
    one = md.launch(train_on_grid, 1, args=(1, 1, 1), backend="local", timeout=60)[0]
    results = md.launch(train_on_grid, 4, args=shape, backend="mpi", timeout=150)
    dp, tp = shape[0], shape[2]
    finals = [r for r in results if r[0] is not None]   # the last stage of each pipeline
    assert len(finals) == dp * tp
    replicas = np.mean([finals[i * tp] for i in range(dp)], axis=0)
    np.testing.assert_allclose(replicas, one, rtol=1e-10)
