"""The tensor-parallel benchmark runs end to end on tiny blocks and prints its table and its
target (no timing asserted: the target is printed as met or missed, never checked here)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import minidist as md
from minidist.bench import model_parallel as bench

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


@pytest.mark.timeout(60)
def test_every_row_is_measured_for_every_width_on_in_process_ranks(capsys):
    args = bench.parse_args(["--quick"])
    results = md.launch(bench.report, 2, args=(args,), backend="local", timeout=50)
    for rank_results in results:
        assert [r["d"] for r in rank_results] == [32, 64]
        for r in rank_results:
            for row in bench.ROWS:
                median, best = r[row]
                assert 0 < best <= median, row
    out = capsys.readouterr().out
    assert "at TP = 2 vs one process: 128 tokens" in out
    assert "target: TP = 2 step <= 0.75x one process's at d = 64 (median): " in out


@pytest.mark.timeout(60)
def test_zero_and_moe_tables_are_printed_by_their_own_benchmarks(capsys):
    assert bench.main(["--quick", "--part", "counts"]) == 0
    out = capsys.readouterr().out
    assert "# 2. ZeRO" in out and "counted = formula on every rank, bytes held and sent: yes" in out
    assert "# 3. MoE" in out and "target: measured = formula on every rank of every row: met" in out


@pytest.mark.mpi
@pytest.mark.timeout(250)
def test_the_benchmark_restarts_itself_under_mpiexec_and_prints_table_and_target():
    done = subprocess.run([sys.executable, "-m", "minidist.bench.model_parallel", "--quick"],
                          capture_output=True, text=True, timeout=240, env=ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["d"])
    for column in ("one process", "TP = 2", "TP compute", "2 allreduces", "allreduce share"):
        assert column in header
    assert [line.split()[0] for line in lines if line.split()[:1] in (["32"], ["64"])] == \
        ["32", "64"]
    target = next(line for line in lines if line.startswith("target:"))
    assert target.split(": ")[-1].split()[0] in ("met", "MISSED")
    assert "# 2. ZeRO" in done.stdout and "# 3. MoE" in done.stdout


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_rank_count_that_cannot_split_the_blocks_is_refused():
    done = subprocess.run([sys.executable, "-m", "minidist.bench.model_parallel", "--ranks", "3",
                           "--widths", "32"], capture_output=True, text=True, timeout=50, env=ENV)
    assert done.returncode != 0
    # said once, before mpiexec: once each rank said it, then MPICH's MPI_Abort lines
    assert done.stderr.count("needs P >= 2 ranks dividing every block's 4d hidden units; "
                             "got P = 3") == 1 and "MPI_Abort" not in done.stderr
