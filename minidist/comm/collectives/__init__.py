"""Collectives, written once on the Communicator interface.

- ``agreement``: the header check every collective runs first (a mismatch is
  the same error on every rank, never a hang);
- ``basic``: broadcast, reduce, gather, scatter, allgather, reduce-scatter, alltoall,
  alltoallv, barrier, as the lessons (Lab 2; alltoallv: Lecture 7); ``checked``: the
  library's, which run them;
- ``allreduce``: the allreduce entry point and its algorithms, one file each:
  ``central`` (naive and parameter server), ``ring``, ``tree``, ``doubling``.
"""

from minidist.comm.collectives.allreduce import ALGORITHMS, allreduce
from minidist.comm.collectives.checked import (
    allgather,
    alltoall,
    alltoallv,
    barrier,
    broadcast,
    gather,
    reduce,
    reduce_scatter,
    scatter,
)

__all__ = [
    "ALGORITHMS", "allreduce", "allgather", "alltoall", "alltoallv", "barrier", "broadcast",
    "gather", "reduce", "reduce_scatter", "scatter",
]
