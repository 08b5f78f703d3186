"""Allreduce: every rank contributes a vector, every rank gets the reduction of all of them.

Data parallelism is built on this one collective (gradients are averaged by
an allreduce every step), and there are many ways to run it, each a
different trade of latency (how many message rounds) against bandwidth (how
many bytes each rank moves) and fan-in (how many messages arrive at one
rank at once). With P ranks and N bytes:

================== ==================== ===================== =========
algorithm          message latencies    bytes sent per rank   fan-in
================== ==================== ===================== =========
naive (master)     2(P-1) at rank 0     (P-1)N at rank 0      P-1
ps (sharded)       2(P-1)               2(P-1)/P N            P-1
ring               2(P-1)               2(P-1)/P N            1
tree               2 log2 P (1 at P=2)  up to 3N              2
double_tree        2 log2 P             up to 2N              2
recursive_doubling log2 P (+2)          N log2 P              1
mpi                MPI's own choice
================== ==================== ===================== =========

The second column counts message times on the critical path (what the
in-process transport calls ``rounds``): naive and ps send in only two
steps, but the P-1 messages of a step queue at one link, one after another.
``comm.cost`` gives the exact figures per rank and the modelled time; the
in-process transport counts the same figures as the algorithms run.

Every algorithm accepts any world size, any length (0, shorter than P, not
divisible by P), float32/float64/int32/int64 and the ops sum/max/min/prod,
and leaves identical bits on every rank. Before the data moves the ranks
check that they agree on length, dtype, op and algorithm (see
``agreement.py``), so a mismatch raises the same error on every rank
instead of hanging.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minidist.comm.collectives.agreement import (
    check_same_everywhere,
    checked_small_allreduce,
    rides_with_check,
)
from minidist.comm.collectives.central import naive_allreduce, ps_allreduce
from minidist.comm.collectives.doubling import recursive_doubling_allreduce
from minidist.comm.collectives.ring import ring_allreduce
from minidist.comm.collectives.tree import double_tree_allreduce, tree_allreduce
from minidist.comm.transport.communicator import Communicator


def mpi_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str) -> None:
    """MPI's own ``Allreduce`` on the raw mpi4py communicator (``c.mpi_comm``).

    MPICH picks its algorithm by size (recursive doubling for short vectors,
    Rabenseifner's reduce-scatter + allgather for long ones). MPI's internal
    messages are not counted by the transport. A transport without MPI (the
    in-process one) runs ``recursive_doubling_allreduce`` instead, MPICH's
    short-vector choice, so code written for ``"mpi"`` runs anywhere.
    """
    mpi_comm = getattr(c, "mpi_comm", None)
    if mpi_comm is None:
        recursive_doubling_allreduce(src, out, c, op)
        return
    from mpi4py import MPI

    mpi_op = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]
    # communication: whatever MPI's own schedule sends (not counted by the transport)
    mpi_comm.Allreduce(MPI.IN_PLACE if out is src else src, out, op=mpi_op)


ALGORITHMS: dict[str, Callable[[np.ndarray, np.ndarray, Communicator, str], None]] = {
    "naive": naive_allreduce,
    "ps": ps_allreduce,
    "ring": ring_allreduce,
    "tree": tree_allreduce,
    "double_tree": double_tree_allreduce,
    "recursive_doubling": recursive_doubling_allreduce,
    "mpi": mpi_allreduce,
}
_ALGORITHM_CODES = {name: k + 1 for k, name in enumerate(ALGORITHMS)}


def allreduce(arr: np.ndarray, c: Communicator, op: str = "sum", algorithm: str = "ring",
              *, out: np.ndarray | None = None, check: bool = True) -> np.ndarray:
    """Reduce ``arr`` over all ranks of ``c`` with ``op``; every rank gets the result.

    Returns a new array of ``arr``'s shape and dtype; ``arr`` is unchanged.
    ``out=`` writes the result into a C-contiguous array of the same shape
    and dtype instead; ``out=arr`` reduces in place. ``check=False`` skips
    the agreement check on length, dtype, op and algorithm (one small
    allreduce, see ``agreement.py``): faster for tiny vectors, but a
    mismatch may then hang instead of raising (all ranks must pass the same
    ``check``).
    """
    run = ALGORITHMS.get(algorithm)
    if run is None:
        raise ValueError(f"allreduce: unknown algorithm {algorithm!r}; "
                         f"use one of {list(ALGORITHMS)}")
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr)
    if not arr.flags.c_contiguous:
        src = np.ascontiguousarray(arr).reshape(-1)
    else:  # the algorithms see 1-D arrays (a view: no copy)
        src = arr if arr.ndim == 1 else arr.reshape(-1)
    if out is None:
        result = np.empty_like(src)
    elif out.shape != arr.shape or out.dtype != arr.dtype or not out.flags.c_contiguous:
        raise ValueError(f"allreduce: out must be C-contiguous {arr.dtype} of shape {arr.shape}")
    elif out is arr:
        result = src  # in place: the algorithms see one buffer
    else:
        result = out if out.ndim == 1 else out.reshape(-1)
        # two arrays that own their memory cannot overlap (np.may_share_memory costs ~0.5 µs)
        if (out.base is not None or arr.base is not None) and np.may_share_memory(result, src):
            raise ValueError("allreduce: out overlaps arr; pass out=arr to reduce in place")
    code = _ALGORITHM_CODES[algorithm]
    if check and rides_with_check(algorithm, c.size, src.nbytes):
        # the check and the data in the same packets (see agreement.py)
        checked_small_allreduce(src, result, c, op, length=src.size, algorithm=code)
    else:
        check_same_everywhere(c, "allreduce", src.dtype, op, check, length=src.size,
                              algorithm=code)
        if src.size:
            c.price_as_part_of(src.nbytes)  # a modelled clock prices at the vector's size
            try:
                run(src, result, c, op)
            finally:
                c.price_as_part_of(None)
    return out if out is not None else result.reshape(arr.shape)
