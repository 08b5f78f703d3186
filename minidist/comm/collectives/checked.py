"""The library's collectives: ``comm.broadcast``, ``reduce``, ``gather``, ``scatter``,
``allgather``, ``reduce_scatter``, ``alltoall``, ``alltoallv`` and ``barrier``.

Each runs a lesson of ``basic.py`` (Lab 2's answers and the schedules
written the same way), adding beneath it what a library needs, each
explained where it lives:

1. the agreement check (``agreement.py``): the ranks first agree on the
   collective, length, dtype, op, root and schedule (and the shape, where
   the result's layout depends on it: gather, scatter, allgather, alltoall), so a mismatch (two
   different collectives called at once included) raises the same error on
   every rank instead of hanging (``check=False`` skips it); it runs on
   ``c.private()``, as the allreduce's does, so every collective's check
   meets every other's and none meets the user's messages;
2. a communicator of their own, ``c.private()`` (``MPI_Comm_dup``): the
   lesson's tag-0 messages never meet the user's;
3. ``c.combine`` (in-place reduction) and ``c.scratch`` (kept buffers), in
   ``transport/communicator.py``;
4. device arrays (cupy's) staged through counted host copies (``staging.py``).
"""

from __future__ import annotations

import numpy as np

from minidist import backend
from minidist.comm.collectives.agreement import NO_OP, as_array, check_same_everywhere
from minidist.comm.collectives.basic import (
    allgather_ring,
    alltoall_pairwise,
    alltoallv_pairwise,
    barrier_dissemination,
    broadcast_binomial,
    broadcast_linear,
    gather_linear,
    reduce_binomial,
    reduce_scatter_ring,
    scatter_linear,
)
from minidist.comm.collectives.staging import staged
from minidist.comm.transport.communicator import Communicator, is_rank

__all__ = ["broadcast", "reduce", "gather", "scatter", "allgather", "reduce_scatter",
           "alltoall", "alltoallv", "barrier"]

BROADCASTS = {"linear": broadcast_linear, "binomial": broadcast_binomial}


NO_ROOT = object()  # a collective without a root (allgather, ...); None is a wrong root


def agreed(c: Communicator, what: str, arr: np.ndarray, op: object = NO_OP,
           check: bool = True, root: object = NO_ROOT, rows: bool = False,
           shaped: bool = False, **fields: int | tuple) -> np.ndarray:
    """``arr`` as a C-contiguous array (copied only if it is not one), once every rank
    agrees on the call: length, dtype, ``op``, ``root``, a first axis of P ``rows``,
    ``fields`` and, if ``shaped``, the array's shape. Any mismatch or bad value raises
    the same error on every rank."""
    arr, problem = as_array(arr)
    first = {"valid_in": int(not problem)}  # before ``fields`` (a shape); the agreement
    # names a valid_ field first when it differs
    if root is not NO_ROOT:  # a root that is no rank (True, 2**70, 1.0) travels as -1
        first["root"] = int(root) if is_rank(root, c.size) else -1
        if first["root"] < 0:
            problem = problem or f"root {root!r} is not a rank of a communicator of size " \
                                 f"{c.size}"
    if rows:
        first["leading"] = arr.shape[0] if arr.ndim else -1
    fields = {**first, **fields, **({"shape": arr.shape} if shaped else {})}
    try:
        check_same_everywhere(c.private(), what, arr.dtype, op, check, length=arr.size,
                              **fields)
    except ValueError as err:  # the ranks disagree: the one at fault also says why
        if problem:
            raise ValueError(f"{err}; here: {problem}") from None
        raise
    if problem:
        raise ValueError(f"{what}: {problem}")
    if rows and fields["leading"] != c.size:
        raise ValueError(f"{what}: the array needs a first axis of length P = {c.size}, "
                         f"got shape {arr.shape}")
    return arr


def with_array_rows(arr: np.ndarray, rows_axis: int) -> np.ndarray:
    """``arr``, with an axis of 1 added when its rows would be numbers (a 0-d array, rows
    axis 0; a 1-D one, rows axis 1): a message is an array, never a bare number."""
    return arr.reshape(*arr.shape, 1) if arr.ndim == rows_axis else arr


def broadcast(arr: np.ndarray, c: Communicator, root: int = 0, algorithm: str = "binomial",
              *, check: bool = True) -> np.ndarray:
    """The root's ``arr`` on every rank (the others pass an array of the same shape and dtype).

    ``algorithm``: ``"binomial"`` (:func:`broadcast_binomial`, ceil(log2 P)
    rounds) or ``"linear"`` (:func:`broadcast_linear`, P-1 rounds).
    """
    if backend.on_device(arr):  # a device array: through host copies (staging.py)
        return staged(broadcast, arr, c, root, algorithm, check=check)
    schedule = list(BROADCASTS).index(algorithm) + 1 \
        if isinstance(algorithm, str) and algorithm in BROADCASTS else 0
    arr = agreed(c, "broadcast", arr, NO_OP, check, root, schedule=schedule, shaped=True)
    if not schedule:
        raise ValueError(f"broadcast: unknown algorithm {algorithm!r}; use one of "
                         f"{list(BROADCASTS)}")
    return BROADCASTS[algorithm](arr, c.private(), root)


def reduce(arr: np.ndarray, c: Communicator, root: int = 0, op: str = "sum",
           *, check: bool = True) -> np.ndarray | None:
    """Every rank's ``arr`` reduced on the root; None elsewhere (:func:`reduce_binomial`)."""
    if backend.on_device(arr):  # a device array: through host copies (staging.py)
        return staged(reduce, arr, c, root, op, check=check)
    arr = agreed(c, "reduce", arr, op, check, root)
    return reduce_binomial(arr, c.private(), root, op)


def gather(arr: np.ndarray, c: Communicator, root: int = 0,
           *, check: bool = True) -> np.ndarray | None:
    """On the root, every rank's ``arr`` stacked, shape ``(P, *arr.shape)``; None elsewhere
    (:func:`gather_linear`)."""
    if backend.on_device(arr):  # a device array: through host copies (staging.py)
        return staged(gather, arr, c, root, check=check)
    arr = agreed(c, "gather", arr, NO_OP, check, root, shaped=True)
    out = gather_linear(with_array_rows(arr, 0), c.private(), root)
    return None if out is None else out.reshape(c.size, *arr.shape)


def scatter(arr: np.ndarray, c: Communicator, root: int = 0, *, check: bool = True) -> np.ndarray:
    """Row ``rank`` of the root's ``arr`` of shape ``(P, ...)`` (the other ranks pass the
    same shape) (:func:`scatter_linear`)."""
    if backend.on_device(arr):  # a device array: through host copies (staging.py)
        return staged(scatter, arr, c, root, check=check)
    arr = agreed(c, "scatter", arr, NO_OP, check, root, rows=True, shaped=True)
    return scatter_linear(with_array_rows(arr, 1), c.private(), root).reshape(arr.shape[1:])


def allgather(arr: np.ndarray, c: Communicator, *, check: bool = True) -> np.ndarray:
    """Every rank's ``arr`` stacked on every rank, ``(P, *arr.shape)`` (:func:`allgather_ring`)."""
    if backend.on_device(arr):  # a device array: through host copies (staging.py)
        return staged(allgather, arr, c, check=check)
    arr = agreed(c, "allgather", arr, NO_OP, check, shaped=True)
    return allgather_ring(with_array_rows(arr, 0), c.private()).reshape(c.size, *arr.shape)


def reduce_scatter(arr: np.ndarray, c: Communicator, op: str = "sum",
                   *, check: bool = True) -> np.ndarray:
    """Chunk ``rank`` of the reduction of the flattened ``arr`` over all ranks; chunk k is
    ``chunk_bounds(arr.size, P)[k]``, sizes differ by at most one (:func:`reduce_scatter_ring`)."""
    if backend.on_device(arr):  # a device array: through host copies (staging.py)
        return staged(reduce_scatter, arr, c, op, check=check)
    arr = agreed(c, "reduce_scatter", arr, op, check)
    return reduce_scatter_ring(arr.reshape(-1), c.private(), op)


def alltoall(arr: np.ndarray, c: Communicator, *, check: bool = True) -> np.ndarray:
    """Row j of every rank's ``arr`` (shape ``(P, ...)``) goes to rank j: ``out[i]`` is rank
    i's row (:func:`alltoall_pairwise`)."""
    if backend.on_device(arr):  # a device array: through host copies (staging.py)
        return staged(alltoall, arr, c, check=check)
    arr = agreed(c, "alltoall", arr, NO_OP, check, rows=True, shaped=True)
    return alltoall_pairwise(with_array_rows(arr, 1), c.private()).reshape(arr.shape)


def alltoallv(arr: np.ndarray, counts, c: Communicator,
              *, check: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The all-to-all with variable counts (``MPI_Alltoallv``), as expert parallelism
    sends tokens: ``arr``'s rows are this rank's blocks one after the other, ``counts[j]``
    rows for rank j (any of them 0). Returns ``(out, recv_counts)``: the rows every rank
    sent here, rank 0's block first, and how many came from each rank.

        out, recv_counts = alltoallv(tokens, counts, c)    # tokens sorted by destination
        back, _ = alltoallv(processed, recv_counts, c)     # the reverse: each row goes home

    The ranks agree on the dtype and the shape of a row (``arr.shape[1:]``), not on
    the counts, which are exchanged (:func:`alltoallv_pairwise`: 2(P-1) rounds).
    Counts that are not P non-negative integers summing to ``len(arr)`` are an error
    on every rank, with its reason on the ranks that passed them.
    """
    if backend.on_device(arr):  # a device array: through host copies (staging.py)
        return staged(alltoallv, arr, counts, c, check=check)
    arr = np.require(arr, requirements="C")
    counts = backend.to_numpy(counts)  # they decide the schedule: on the host (a copy of a
    # device array's, which staging leaves to this line)
    problem = _counts_problem(arr, counts, c.size)
    row = arr.shape[1:]
    try:
        check_same_everywhere(c.private(), "alltoallv", arr.dtype, NO_OP, check, ndim=arr.ndim,
                              row_items=int(np.prod(row)), row_shape=row,
                              valid_counts=int(not problem))
    except ValueError as err:
        raise ValueError(f"{err}; here: {problem}" if problem else str(err)) from None
    if problem:
        raise ValueError(f"alltoallv: {problem}")
    return alltoallv_pairwise(arr, counts.astype(np.int64), c.private())


def _counts_problem(arr: np.ndarray, counts: np.ndarray, p: int) -> str:
    """What is wrong with ``counts`` as alltoallv's blocks of ``arr`` ("" if nothing)."""
    if arr.ndim == 0:
        return "the array needs a first axis (its rows), got a 0-d array"
    if counts.shape != (p,) or counts.dtype.kind not in "iu":
        return (f"counts must be P = {p} integers, got {counts.dtype} of shape "
                f"{counts.shape}")
    if counts.size and counts.min() < 0:
        return f"counts must not be negative, got {counts.tolist()}"
    if counts.sum() != arr.shape[0]:
        return (f"counts {counts.tolist()} add up to {int(counts.sum())}, but the array has "
                f"{arr.shape[0]} rows")
    return ""


def barrier(c: Communicator, *, check: bool = True) -> None:
    """Return only when every rank has called it (:func:`barrier_dissemination`), after
    the agreement check (a rank in another collective is an error on every rank)."""
    private = c.private()
    # a barrier moves no data: float64 stands in for the dtype every collective names
    check_same_everywhere(private, "barrier", np.dtype(np.float64), NO_OP, check)
    barrier_dissemination(private)
