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
tree               <= 4 floor(log2 P)   up to 3N              2
double_tree        two trees on N/2     up to 2N              2
recursive_doubling log2 P (+2)          N log2 P              1
mpi                MPI's own choice
================== ==================== ===================== =========

The second column counts message times on the critical path (what the
in-process transport calls ``rounds``): naive and ps send in only two
steps, but the P-1 messages of a step queue at one link, one after another.
``comm.cost`` gives the exact figures per rank and the modelled time; the
in-process transport counts the same figures as the algorithms run.

Each algorithm is one function, written as Lab 3 teaches it:
``fn(x, c, op)`` reduces the 1-D array ``x`` in place (as ``MPI_IN_PLACE``)
and returns it (``central.py``, ``ring.py``, ``tree.py``, ``doubling.py``).
What a library needs around them lives here and beneath, each in one place:

1. the result buffer: :func:`allreduce` copies ``arr`` into ``out`` (or a
   new array) once, and the algorithm reduces that in place;
2. the agreement check (``agreement.py``): every rank first checks that all
   agree on length, dtype, op and algorithm, and that every ``out=`` fits, so
   a mismatch or a mistake on one rank raises the same error on every rank
   instead of hanging; a short allreduce by one of the
   latency algorithms (recursive doubling, tree, double tree) rides inside
   the check's packets (the small-message path);
3. a private context: the algorithms run on ``c.private()``, a duplicate of
   ``c`` (``MPI_Comm_dup``), so they send with the default tag and never
   meet the user's messages;
4. kept receive buffers (``c.scratch``) and in-place reduction
   (``c.combine``), in ``transport/communicator.py``;
5. device arrays (cupy's) staged through counted host copies (``staging.py``).

Every algorithm accepts any world size, any length (0, shorter than P, not
divisible by P), the dtypes and ops of ``comm/ops.py``, and leaves
identical bits on every rank.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minidist import backend
from minidist.comm.collectives.agreement import (
    as_array,
    check_same_everywhere,
    checked_small_allreduce,
    rides_with_check,
)
from minidist.comm.collectives.central import naive_allreduce, ps_allreduce
from minidist.comm.collectives.doubling import recursive_doubling_allreduce
from minidist.comm.collectives.ring import ring_allreduce
from minidist.comm.collectives.staging import staged
from minidist.comm.collectives.tree import double_tree_allreduce, tree_allreduce
from minidist.comm.transport.communicator import SCRATCH_KEPT_FROM, Communicator
from minidist.util.pages import page_aligned_empty


def mpi_allreduce(x: np.ndarray, c: Communicator, op: str = "sum") -> np.ndarray:
    """MPI's own ``Allreduce``, in place (``MPI_IN_PLACE``), on the raw mpi4py communicator.

    MPICH picks its algorithm by size (recursive doubling for short vectors,
    Rabenseifner's reduce-scatter + allgather for long ones). MPI's internal
    messages are not counted by the transport. A transport without MPI (the
    in-process one) runs ``recursive_doubling_allreduce`` instead, MPICH's
    short-vector choice, so code written for ``"mpi"`` runs anywhere.
    """
    mpi_comm = getattr(c, "mpi_comm", None)
    if mpi_comm is None:
        return recursive_doubling_allreduce(x, c, op)
    from mpi4py import MPI

    mpi_op = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]
    # communication: whatever MPI's own schedule sends (not counted by the transport)
    mpi_comm.Allreduce(MPI.IN_PLACE, x, op=mpi_op)
    return x


ALGORITHMS: dict[str, Callable[[np.ndarray, Communicator, str], np.ndarray]] = {
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
    if backend.on_device(arr):  # a device array: through host copies (staging.py)
        return staged(allreduce, arr, c, op, algorithm, out=out, check=check)
    if isinstance(arr, np.ndarray):
        problem = ""
    elif hasattr(arr, "requires_grad"):  # a Tensor: its array is what travels
        arr, problem = np.empty(0), "the data is a Tensor: pass its .data (an array)"
    else:
        arr, problem = as_array(arr)
    # an unknown algorithm (code 0), data that makes no array or an unfit out= is agreed
    # on first, so that a mistake on one rank is an error on every rank, not a hang
    code = _ALGORITHM_CODES.get(algorithm, 0) if isinstance(algorithm, str) else 0
    valid_in = not problem
    problem = problem or _out_problem(arr, out)
    fields = dict(length=arr.size, algorithm=code, valid_in=int(valid_in),
                  valid_out=int(valid_in and not problem))
    private = c.private()
    if check and not problem and rides_with_check(algorithm, c.size, arr.nbytes):
        # the small-message path: the data rides in the check's packets (see agreement.py)
        result = _result_buffer(arr, out)
        flat = (arr, result) if arr.ndim == 1 else (arr.reshape(-1), result.reshape(-1))
        checked_small_allreduce(*flat, private, op, **fields)
        return result
    try:
        check_same_everywhere(private, "allreduce", arr.dtype, op, check, **fields)
    except ValueError as err:  # the ranks disagree: the one at fault also says why
        if problem:
            raise ValueError(f"{err}; here: {problem}") from None
        raise
    if not fields["algorithm"]:
        raise ValueError(f"allreduce: unknown algorithm {algorithm!r}; "
                         f"use one of {list(ALGORITHMS)}")
    if problem:
        raise ValueError(f"allreduce: {problem}")
    run, result = ALGORITHMS[algorithm], _result_buffer(arr, out)
    if result is not arr:
        result[...] = arr  # the one copy: from here on the algorithm works in place
    if arr.size and c.size > 1:
        private.price_as_part_of(arr.nbytes)  # a modelled clock prices at the vector's size
        try:
            run(result.reshape(-1), private, op)
        finally:
            private.price_as_part_of(None)
    return result


def _out_problem(arr: np.ndarray, out: np.ndarray | None) -> str:
    """What is wrong with ``out`` as the result buffer of ``arr`` ("" if nothing)."""
    if out is None:
        return ""
    if not isinstance(out, np.ndarray) or out.shape != arr.shape or out.dtype != arr.dtype \
            or not out.flags.c_contiguous:
        return f"out must be C-contiguous {arr.dtype} of shape {arr.shape}"
    if not out.flags.writeable:
        return "out is read-only"
    # two arrays that own their memory cannot overlap (np.may_share_memory is not free)
    if out is not arr and (out.base is not None or arr.base is not None) \
            and np.may_share_memory(out, arr):
        return "out overlaps arr; pass out=arr to reduce in place"
    return ""


def _result_buffer(arr: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``out`` (checked by :func:`_out_problem`), or a new array of ``arr``'s shape and
    dtype when None: a long one starts a page (util/pages.py), as the kept scratch does."""
    if out is not None:
        return out
    if arr.nbytes < SCRATCH_KEPT_FROM:
        return np.empty(arr.shape, arr.dtype)
    return page_aligned_empty(arr.shape, arr.dtype)
