"""Pipelines across real MPI processes: the same answer as one process."""

from __future__ import annotations

import pytest
from test_pipeline import assert_matches_one_process, pipeline_rank, single_process

import minidist as md


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_two_processes_equal_one(schedule):
    loss, grads, _ = single_process()
    results = md.launch(pipeline_rank, 2, args=(schedule, 4), backend="mpi", timeout=200)
    assert_matches_one_process(results, loss, grads)
    assert [r[2] for r in results] == ([4, 4] if schedule == "gpipe" else [2, 1])


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_three_processes_train_as_one():
    *_, expected = single_process(steps=2, lr=0.1)
    results = md.launch(pipeline_rank, 3, args=("1f1b", 3, 2, 0.1), backend="mpi", timeout=200)
    params = {name: p for r in results for name, p in r[3].items()}
    assert sorted(params) == sorted(expected)
    for name, value in expected.items():
        assert params[name] == pytest.approx(value, rel=1e-10, abs=1e-12), name
