"""The MoE example: expert parallelism on 2 and 4 in-process ranks trains exactly as one process
does (float64), the balancing loss evens the experts' loads, and its command line prints the
comparison and the table (under mpiexec too); the MoE benchmark's tables."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_example import run_under_mpiexec

import minidist as md
from minidist.examples import moe as example

MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("p", "top_k"), [(2, 1), (4, 2)])
def test_expert_parallel_training_is_one_process_training(p: int, top_k: int) -> None:
    options = dict(epochs=2, top_k=top_k, dtype=np.float64, progress=False)
    alone = example.train(groups=p, **options)
    for run in md.launch(lambda c: example.train(c, **options), p, backend="local", timeout=110):
        np.testing.assert_allclose(run["losses"], alone["losses"], rtol=1e-10)
        for key, counts in alone["table"].items():
            np.testing.assert_array_equal(run["table"][key], counts, err_msg=key)
        assert run["accuracy"] == alone["accuracy"]
    assert alone["losses"][1] < alone["losses"][0]


@pytest.mark.timeout(120)
def test_the_balancing_loss_evens_the_load_and_without_it_experts_starve() -> None:
    balanced = example.train(groups=2, epochs=6, progress=False)["table"]
    left_alone = example.train(groups=2, epochs=6, balance=0.0, progress=False)["table"]
    assert balanced["routed"].max() < 1.2 * balanced["routed"].mean()
    assert left_alone["routed"].max() > 1.5 * left_alone["routed"].mean()
    assert left_alone["dropped_tokens"] > 3 * balanced["dropped_tokens"]


@pytest.mark.timeout(60)
def test_command_line_prints_the_losses_against_one_process_and_the_table(capsys) -> None:
    result = example.main(["--epochs", "2", "--experts", "2", "--top-k", "2"])
    out = capsys.readouterr().out
    assert "loss, 1 ranks" in out and "loss, 1 process" in out
    assert "tokens per expert, last epoch, all 1 ranks (E = 2, top-2)" in out
    assert "imbalance (max/mean routed)" in out and "test accuracy" in out
    assert result["losses"] == result["alone"]["losses"]


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")
def test_the_example_under_mpiexec() -> None:

    job = run_under_mpiexec(2, "minidist.examples.moe", ["--epochs", "2"], timeout=110)
    out, err = job.stdout, job.stderr
    assert job.returncode == 0, out + err
    assert "loss, 2 ranks" in out and "all 2 ranks (E = 4, top-1)" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("2 ")]
    assert abs(float(rows[0][3])) < 1e-6  # epoch 2: the difference from one process


@pytest.mark.timeout(60)
def test_moe_benchmark_counts_what_the_formula_says_and_prints_both_tables(capsys) -> None:
    from minidist.bench import moe as bench

    result = bench.main(["--ranks", "2,3", "--experts", "6", "--tokens", "16", "--d-model", "4",
                         "--hidden", "8"])
    out = capsys.readouterr().out
    assert [(row["p"], row["top_k"]) for row in result["rows"]] == [(2, 1), (2, 2), (3, 1), (3, 2)]
    assert all(row["exact"] and row["measured"] == row["formula"] for row in result["rows"])
    assert "measured = formula on every rank of every row: met" in out
    random, skewed = result["tables"].values()
    assert skewed["routed"][0] == skewed["routed"].max() > random["routed"].max()
    assert skewed["dropped_tokens"] > random["dropped_tokens"]
    assert out.count("imbalance (max/mean routed)") == 2
