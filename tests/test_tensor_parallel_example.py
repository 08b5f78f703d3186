"""The tensor-parallel example trains the transformer as one process does (in-process ranks,
and under a real mpiexec), and counts its allreduces: 2 per block forward, 2 backward."""

from __future__ import annotations

import re

import numpy as np
import pytest
from mpi_example import run_under_mpiexec

from minidist.examples import tensor_parallel as example

QUICK = ["--steps", "6", "--d", "16", "--context", "12", "--batch", "8"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks, dtype, rtol", [(2, "float64", 1e-10), (4, "float32", 1e-5)])
def test_p_ranks_train_as_one_process_with_one_allreduce_per_half_block_and_pass(
        ranks, dtype, rtol, capsys):
    result = example.main([*QUICK, "--ranks", str(ranks), "--dtype", dtype])
    single = result["single"]["losses"]
    np.testing.assert_allclose(result["losses"], single, rtol=rtol)
    assert single[-1] < single[0]
    ring = 2 * (ranks - 1)  # messages per rank of one ring allreduce
    assert result["messages"] == 4 * 2 * ring  # 2 blocks x (attention, MLP) x (fwd, bwd)
    itemsize = np.dtype(dtype).itemsize
    assert result["bytes"] == 8 * ring / ranks * 8 * 12 * 16 * itemsize
    assert result["single"]["messages"] == 0
    out = capsys.readouterr().out
    assert f"TP = {ranks}: final loss" in out
    assert "allreduces per step: 8 counted" in out and "= 8;" in out


@pytest.mark.timeout(60)
def test_one_rank_is_the_whole_model(capsys):
    result = example.main([*QUICK, "--steps", "2"])
    np.testing.assert_array_equal(result["losses"], result["single"]["losses"])
    assert result["messages"] == 0
    assert "one rank: the blocks are whole, no allreduce" in capsys.readouterr().out


@pytest.mark.parametrize("options, message", [
    (["--ranks", "3"], "4 heads cannot be split over 3 tensor-parallel ranks"),
    (["--d", "18"], "--d 18 is not divisible by --heads 4"),
    (["--steps", "0"], "argument --steps: wants an integer >= 1, got '0'"),
    (["--heads", "0"], "argument --heads: wants an integer >= 1, got '0'"),
    (["--ranks", "0"], "argument --ranks: wants an integer >= 1, got '0'"),
])
def test_bad_input_is_a_clear_error_and_exit_status_2(options, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        example.main([*QUICK, *options])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_two_mpi_processes_train_as_one():
    job = run_under_mpiexec(2, "minidist.examples.tensor_parallel", QUICK)
    out, err = job.stdout, job.stderr
    assert job.returncode == 0, out + err
    assert "TP = 2: final loss" in out and "allreduces per step: 8 counted" in out
    difference = float(re.search(r"largest difference over the curve (\S+) ", out)[1])
    assert difference < 1e-12  # float64: the same arithmetic, rounded in another order
