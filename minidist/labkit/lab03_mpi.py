"""Lab 3, Task 6 on real MPI processes: the student's ring, its bytes counted by MPI.

Run where the student runs the check (the function is their own), the job is
``md.launch(..., backend="mpi")`` of the ring on every rank, started from their
process (``ring_on_student_mpi``). When the lab is graded the ring lives in the
kernel (a ``Remote``), and the MPI processes are the grader's own
(``mpi_ranks.py``): the ring in the kernel drives them, and the bytes are what
those processes counted, out of the student's code's reach. Apart from
``lab03.py``, whose checks run on in-process ranks.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm import CommStats
from minidist.comm.errors import RankError
from minidist.labkit.blocking import blocked
from minidist.labkit.mpi_ranks import MPIRanks, run_on_mpi_ranks
from minidist.labkit.ranks import as_one_sentence
from minidist.labkit.remote import Remote, on_student


def ring_on_mpi(ring: Callable[..., np.ndarray], data: np.ndarray, block: tuple[str, ...],
                what: str) -> list[tuple[bool, np.ndarray, int]]:
    """``ring`` on one MPI process per row of ``data``; per rank, whether it returned its
    own x, x afterwards, and the bytes its MPI process sent."""
    __tracebackhide__ = True
    if not isinstance(ring, Remote):
        return on_student(ring_on_student_mpi, ring, data, block, what)
    with MPIRanks(len(data)) as ranks:
        results, stats = run_on_mpi_ranks(ranks, lambda c: _in_place(ring, data, c), what,
                                          block)
    return [(same, x, counted.bytes_sent)
            for (same, x), counted in zip(results, stats, strict=True)]


def _in_place(ring: Callable[..., np.ndarray], data: np.ndarray, c: Any) -> tuple[bool, Any]:
    x = data[c.rank].copy()
    return ring(x, c) is x, x


def ring_on_student_mpi(ring: Callable[..., np.ndarray], data: np.ndarray,
                        block: tuple[str, ...], what: str) -> list[tuple[bool, np.ndarray, int]]:
    """Probe: ``ring`` on one MPI process per row of ``data``, started here."""
    import minidist as md

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # mpiexec's abort messages, if any
            runs = md.launch(allreduce_on_rank, world_size=len(data), args=(ring, data, block),
                             backend="mpi", timeout=60)
    except RankError as error:
        raise as_one_sentence(error, what) from None
    return [(in_place, x, stats.bytes_sent) for in_place, x, stats in runs]


def allreduce_on_rank(c: Any, fn: Callable[..., np.ndarray], data: np.ndarray,
                      block: tuple[str, ...]) -> tuple[bool, np.ndarray, CommStats]:
    """On each MPI rank: ``fn`` on this rank's row, with ``block`` blocked."""
    x = data[c.rank].copy()
    with blocked(*block):
        result = fn(x, c)
    return result is x, x, c.stats.copy()
