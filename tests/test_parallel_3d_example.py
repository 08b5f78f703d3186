"""The 3-D parallelism example: DP x PP x TP grids of in-process ranks (and of MPI processes)
train the transformer as one process does; the messages each rank sent, counted per phase,
are what the formulas of its groups add up to."""

from __future__ import annotations

import re

import numpy as np
import pytest
from mpi_example import run_under_mpiexec

from minidist.examples import parallel_3d as example

QUICK = ["--steps", "4", "--d", "16", "--context", "12", "--batch", "8"]


def formula(rank: int, dp: int, pp: int, tp: int, blocks: int, micro: int) -> tuple[int, int]:
    """Messages a rank sends per step: forward+backward (tp and pp groups), averaging (dp)."""
    p = rank // tp % pp
    micro = micro if pp > 1 else 1
    pipeline = (1 + micro if p < pp - 1 else 0) + (micro if p > 0 else 0)  # header, F, B
    return 4 * blocks * micro * 2 * (tp - 1) + pipeline, 2 * (dp - 1)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("shape", [(2, 2, 1), (2, 1, 2), (1, 2, 2), (2, 2, 2)])
def test_every_grid_trains_as_one_process_and_sends_what_its_groups_should(shape, capsys):
    dp, pp, tp = shape
    options = ["--dp", str(dp), "--pp", str(pp), "--tp", str(tp), "--micro-batches", "2"]
    result = example.main([*QUICK, "--ranks", str(dp * pp * tp), *options])
    single = result["single"]["losses"]
    np.testing.assert_allclose(result["losses"], single, rtol=1e-10)
    assert single[-1] < single[0]
    counts = result["counts"]
    assert len(counts) == dp * pp * tp
    assert sum(counts[:, 2]) == 2 * dp * tp  # each block on one stage of each pipeline
    for rank, (_, _, blocks, running, averaging) in enumerate(counts):
        assert (running, averaging) == formula(rank, dp, pp, tp, blocks, 2), rank
    out = capsys.readouterr().out
    assert f"grid dp={dp} x pp={pp} x tp={tp}" in out
    assert "rank  (d, p, t)  tp group   pp group   dp group" in out
    assert f"dp={dp} x pp={pp} x tp={tp}: final loss" in out


@pytest.mark.timeout(60)
def test_the_table_names_each_stage_and_the_messages_of_its_groups(capsys):
    example.main([*QUICK, "--ranks", "4", "--dp", "2", "--pp", "2"])
    table = capsys.readouterr().out.split("per step:")[1].splitlines()
    assert table[2].split() == ["0", "Embed-Block1", "16", "5", "1", "5", "=", "0", "+", "5",
                                "2", "=", "2"]
    assert table[3].split()[:2] == ["1", "Block2-Head"]


@pytest.mark.parametrize("options, message", [
    (["--ranks", "4", "--dp", "3", "--pp", "2"], "dp=3 x pp=2 x tp=1 needs 6 ranks, there are 4"),
    (["--ranks", "3", "--dp", "3"], "--batch 8 cannot be cut into 3 equal data-parallel shares"),
    (["--ranks", "2", "--tp", "2", "--heads", "3", "--d", "15"],
     "3 heads cannot be split over 2 tensor-parallel ranks"),
    (["--ranks", "5", "--pp", "5"], "--pp 5: the model has 4 layers"),
    (["--ranks", "4", "--dp", "2", "--pp", "2", "--micro-batches", "5"],
     "--micro-batches 5: must be in 1..4"),
])
def test_bad_input_is_a_clear_error_and_exit_status_2(options, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        example.main([*QUICK, *options])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_dp2_pp2_on_four_mpi_processes_trains_as_one():
    job = run_under_mpiexec(4, "minidist.examples.parallel_3d", [*QUICK, "--dp", "2", "--pp", "2"])
    out, err = job.stdout, job.stderr
    assert job.returncode == 0, out + err
    assert "grid dp=2 x pp=2 x tp=1" in out and "Embed-Block1" in out
    difference = float(re.search(r"largest difference over the curve (\S+) ", out)[1])
    assert difference < 1e-12  # float64: the same arithmetic, rounded in another order
