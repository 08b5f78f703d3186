"""DataParallel under a real mpiexec: the same equivalence as in-process, plus real overlap.

One launch per world size runs SGD and Adam with two bucket plans; the
assertions are made here, in the parent, against one process.
"""

import sys
from pathlib import Path

import pytest
from test_ddp import (
    ALL_IN_ONE,
    ONE_PER_TENSOR,
    UNEVEN,
    assert_same_parameters,
    train_ddp,
    train_single,
)

import minidist as md

MPIEXEC = Path(sys.executable).parent / "mpiexec"
pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")]
CASES = [("sgd", ONE_PER_TENSOR), ("adam", UNEVEN), ("sgd", ALL_IN_ONE)]


def train_cases(c, cases, algorithm):
    """Every case on this rank; also whether the communication thread was allowed."""
    from minidist.parallel.overlap import threads_allowed

    states = [train_ddp(c, optimizer, buckets, algorithm)[0] for optimizer, buckets in cases]
    return states, threads_allowed(c)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("world_size, algorithm", [(2, "ring"), (3, "mpi")])
def test_ddp_under_mpi_equals_one_process(world_size, algorithm):
    results = md.launch(train_cases, world_size, args=(CASES, algorithm), backend="mpi",
                        timeout=80)
    expected = [train_single(world_size, optimizer) for optimizer, _ in CASES]
    for states, threads_allowed in results:
        assert threads_allowed  # mpi4py starts MPI with thread support: overlap is on
        for state, reference in zip(states, expected, strict=True):
            assert_same_parameters(state, reference)
