"""Task 6 of Labs 2 and 3, graded: the student's code drives MPI processes of the grader.

Both ends run in one process here (``serve.answer`` as the channel, as in
``test_grading_integrity.py``); the MPI processes are real (``mpiexec``). Where
the student runs a check on their own function, its MPI job is started from
their process and counts there; where the lab is graded, the function is a
``Remote`` and the processes are the grader's (``labkit/mpi_ranks.py``), so an
answer that behaves on in-process ranks and cheats on MPI, forging the counters
its own processes keep, keeps Task 6 only in the first case.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from student_kernel import both_ends, verdict
from test_grading_integrity import RANKS_STUDENT

from minidist.labkit.lab02_mpi import check_ping_pong_on_mpi
from minidist.labkit.lab03 import check_ring_on_mpi
from minidist.labkit.mpi_ranks import MPIRanks, run_on_mpi_ranks

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(180),
              pytest.mark.skipif(not (Path(sys.executable).parent / "mpiexec").exists(),
                                 reason="no mpiexec in this environment")]

STUDENT = RANKS_STUDENT + '''
calls = [0]

def ring_cheating_on_mpi(x, c, op="sum"):
    """A true ring on the dry run's in-process ranks; on MPI (its own processes, or the
    calls after the dry run's) whole vectors go round and the counters say a ring's."""
    calls[0] += 1
    if type(c).__name__ != "MPICommunicator" and calls[0] <= c.size:
        return ring_allreduce(x, c, op)
    ring_passing_the_whole_vector(x, c, op)
    total = 2 * (c.size - 1) * x.nbytes
    c.stats.bytes_sent = total // c.size + (total % c.size if c.rank == 0 else 0)
    return x

def ping_pong_one_way(c, nbytes, repeats):
    """Sends only from rank 0, and writes the missing replies into rank 1's counters."""
    buf = np.zeros(nbytes, np.uint8)
    for _ in range(repeats):
        if c.rank == 0:
            c.send(buf, 1)
        else:
            c.recv(buf, 0)
    if c.rank == 1:
        c.stats.messages_sent, c.stats.bytes_sent = repeats, repeats * nbytes
    return 1e-6
'''


@pytest.fixture
def kernel():
    namespace: dict = {}
    exec(STUDENT, namespace)
    return both_ends(namespace)


def no_rank_server_left() -> bool:
    return not any("mpi_rank_server" in " ".join(p.info["cmdline"] or [])
                   for p in psutil.process_iter(["cmdline"]))


def test_the_graders_mpi_ranks_run_an_allreduce_and_count_its_bytes():
    from minidist.comm.collectives.ring import ring_allreduce

    data = np.arange(21.0).reshape(3, 7)
    with MPIRanks(3) as ranks:
        results, stats = run_on_mpi_ranks(ranks, lambda c: ring_allreduce(data[c.rank].copy(), c),
                                          "ring", ())
    assert all(np.array_equal(x, data.sum(0)) for x in results)
    assert sum(s.bytes_sent for s in stats) == 2 * 2 * data[0].nbytes
    assert [s.messages_sent for s in stats] == [4, 4, 4]
    assert no_rank_server_left()


def test_a_ring_that_cheats_on_mpi_keeps_task_6_only_on_its_own_processes(kernel):
    namespace, remote = kernel
    assert verdict(lambda: check_ring_on_mpi(namespace["ring_cheating_on_mpi"], 3, 10,
                                             "int64")) == "passed"
    namespace["calls"][0] = 0
    assert "480 bytes sent through the communicator in all, a ring sends 2(P-1)N = 320" in \
        verdict(lambda: check_ring_on_mpi(remote("ring_cheating_on_mpi"), 3, 10, "int64"))
    assert verdict(lambda: check_ring_on_mpi(remote("ring_allreduce"), 3, 10, "int64")) == \
        "passed"
    assert no_rank_server_left()


def test_a_ping_pong_that_forges_its_replies_keeps_task_6_only_on_its_own_processes(kernel):
    namespace, remote = kernel
    assert verdict(lambda: check_ping_pong_on_mpi(namespace["ping_pong_one_way"])) == "passed"
    assert "messages_sent" in verdict(lambda: check_ping_pong_on_mpi(remote("ping_pong_one_way")))
    assert verdict(lambda: check_ping_pong_on_mpi(remote("ping_pong"))) == "passed"
    assert no_rank_server_left()
