"""Collectives built from point-to-point messages: who ends up with what.

* broadcast: the root's array on every rank (linear, or a binomial tree).
* reduce: the reduction of every rank's array, on the root (binomial tree).
* gather / scatter: the root collects one array per rank / hands one out.
* allgather: every rank gets every rank's array (ring).
* reduce_scatter: the reduction, cut into P chunks; rank k keeps chunk k (ring).
* alltoall: rank i's block j goes to rank j (pairwise exchange).
* barrier: nobody leaves before everybody has arrived (dissemination).

With P ranks and N bytes: a *linear* schedule (the root talks to each rank
in turn) costs ``P-1`` rounds at the root; a *binomial tree* doubles the
number of informed ranks each round, ``ceil(log2 P)`` rounds; a *ring*
moves ``(P-1)/P·N`` per rank in ``P-1`` rounds of fan-in 1.

Every function is out-of-place (returns a new array), accepts any world size,
any length and the dtypes float32/float64/int32/int64, and first checks that
all ranks agree on length, dtype, op and root (``agreement.py``), so a
mismatch raises the same error on every rank; ``check=False`` skips it.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.collectives.agreement import check_same_everywhere
from minidist.comm.collectives.ring import (
    SEGMENT_BYTES,
    chunk_bounds,
    ring_allgather,
    ring_reduce_scatter,
)
from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator

__all__ = ["broadcast", "reduce", "gather", "scatter", "allgather", "reduce_scatter",
           "alltoall", "barrier", "chunk_bounds"]

TAG = Tag.COLLECTIVE


def _check_root(c: Communicator, root: int) -> None:
    if not 0 <= root < c.size:
        raise ValueError(f"root {root} is not a rank of a communicator of size {c.size}")


def _check_leading(what: str, arr: np.ndarray, p: int) -> None:
    if arr.ndim == 0 or arr.shape[0] != p:
        raise ValueError(f"{what}: the array needs a first axis of length P = {p}, "
                         f"got shape {arr.shape}")


def broadcast(arr: np.ndarray, c: Communicator, root: int = 0, algorithm: str = "binomial",
              *, check: bool = True) -> np.ndarray:
    """The root's ``arr`` on every rank (the others pass an array of the same shape and dtype).

    linear: the root sends N to each rank in turn: P-1 rounds, root sends (P-1)N.
    binomial: every informed rank passes it on: ``ceil(log2 P)`` rounds, each
    rank receives N once, a rank sends N per child (the root ``ceil(log2 P)``).
    """
    if algorithm not in ("linear", "binomial"):
        raise ValueError(f"broadcast: unknown algorithm {algorithm!r}; use 'linear' or 'binomial'")
    arr = np.asarray(arr)
    check_same_everywhere(c, "broadcast", arr.dtype, None, check, length=arr.size, root=root)
    _check_root(c, root)
    out = np.array(arr, order="C") if c.rank == root else np.empty_like(arr, order="C")
    rank, p = c.rank, c.size
    if algorithm == "linear":
        for dest in range(p):
            if rank == root and dest != root:
                # communication: the whole array from the root to each rank in turn
                c.send(out, dest, TAG)
        if rank != root:
            c.recv(out, root, TAG)
        return out
    relative = (rank - root) % p
    # 1. receive once, from the rank that differs in my lowest set bit
    mask = 1
    while mask < p:
        if relative & mask:
            # communication: the array from my parent in the binomial tree
            c.recv(out, (rank - mask) % p, TAG)
            break
        mask <<= 1
    # 2. pass it on to the ranks at distances below that bit, farthest first
    mask >>= 1
    while mask > 0:
        if relative + mask < p:
            # communication: the array to my child in the binomial tree
            c.send(out, (rank + mask) % p, TAG)
        mask >>= 1
    return out


def reduce(arr: np.ndarray, c: Communicator, root: int = 0, op: str = "sum",
           *, check: bool = True) -> np.ndarray | None:
    """The reduction of every rank's ``arr`` on the root; ``None`` on the other ranks.

    Binomial tree (a broadcast run backwards): ``ceil(log2 P)`` rounds, each
    rank sends N once, fan-in up to ``ceil(log2 P)`` at the root.
    """
    arr = np.asarray(arr)
    check_same_everywhere(c, "reduce", arr.dtype, op, check, length=arr.size, root=root)
    _check_root(c, root)
    rank, p = c.rank, c.size
    acc = np.array(arr, order="C")
    scratch = np.empty_like(acc)
    relative = (rank - root) % p
    mask = 1
    while mask < p:
        if relative & mask:
            # communication: my subtree's partial result to my parent, then I am done
            c.send(acc, (rank - mask) % p, TAG)
            return None
        if relative + mask < p:
            # communication: a child's partial result, to be combined into mine
            c.recv(scratch, (rank + mask) % p, TAG)
            c.combine(op, acc, scratch)
        mask <<= 1
    return acc


def gather(arr: np.ndarray, c: Communicator, root: int = 0,
           *, check: bool = True) -> np.ndarray | None:
    """On the root, every rank's ``arr`` stacked: shape ``(P, *arr.shape)``; ``None`` elsewhere.

    Linear: the root receives N from each rank, P-1 rounds, fan-in P-1.
    """
    arr = np.asarray(arr)
    check_same_everywhere(c, "gather", arr.dtype, None, check, length=arr.size, root=root)
    _check_root(c, root)
    if c.rank != root:
        # communication: my array to the root
        c.send(np.ascontiguousarray(arr), root, TAG)
        return None
    out = np.empty((c.size, *arr.shape), arr.dtype)
    for source in range(c.size):
        if source == root:
            out[source] = arr
        else:
            # communication: rank `source`'s array, into its row
            c.recv(out[source], source, TAG)
    return out


def scatter(arr: np.ndarray, c: Communicator, root: int = 0, *, check: bool = True) -> np.ndarray:
    """Row ``rank`` of the root's ``arr`` (shape ``(P, ...)``; other ranks pass the same shape).

    Linear: the root sends N/P to each rank, P-1 rounds.
    """
    arr = np.asarray(arr)
    check_same_everywhere(c, "scatter", arr.dtype, None, check, length=arr.size, root=root,
                          leading=arr.shape[0] if arr.ndim else -1)
    _check_root(c, root)
    _check_leading("scatter", arr, c.size)
    if c.rank == root:
        for dest in range(c.size):
            if dest != root:
                # communication: row `dest` of the root's array to rank `dest`
                c.send(np.ascontiguousarray(arr[dest]), dest, TAG)
        return np.array(arr[root], order="C")
    out = np.empty(arr.shape[1:], arr.dtype)
    c.recv(out, root, TAG)
    return out


def allgather(arr: np.ndarray, c: Communicator, *, check: bool = True) -> np.ndarray:
    """Every rank's ``arr`` stacked, on every rank: shape ``(P, *arr.shape)``.

    Ring: P-1 rounds; each rank sends and receives ``(P-1)N`` (N per round), fan-in 1.
    """
    arr = np.asarray(arr)
    check_same_everywhere(c, "allgather", arr.dtype, None, check, length=arr.size)
    p, n = c.size, arr.size
    out = np.empty((p, *arr.shape), arr.dtype)
    out[c.rank] = arr
    if n > 0:
        flat = out.reshape(-1)
        ring_allgather(flat, c, [(k * n, (k + 1) * n) for k in range(p)],
                       max(1, SEGMENT_BYTES // arr.itemsize))
    return out


def reduce_scatter(arr: np.ndarray, c: Communicator, op: str = "sum",
                   *, check: bool = True) -> np.ndarray:
    """Chunk ``rank`` of the reduction of the flattened ``arr`` over all ranks.

    Chunk k is ``chunk_bounds(arr.size, P)[k]``: sizes differ by at most one.
    Ring: P-1 rounds, each rank sends and receives ``(P-1)/P·N``, fan-in 1.
    """
    arr = np.asarray(arr)
    check_same_everywhere(c, "reduce_scatter", arr.dtype, op, check, length=arr.size)
    src = np.ascontiguousarray(arr).reshape(-1)
    bounds = chunk_bounds(src.size, c.size)
    lo, hi = bounds[c.rank]
    if c.size == 1 or src.size == 0:
        return src[lo:hi].copy()
    out = np.empty_like(src)
    ring_reduce_scatter(src, out, c, op, bounds, max(1, SEGMENT_BYTES // src.itemsize))
    return out[lo:hi].copy()


def alltoall(arr: np.ndarray, c: Communicator, *, check: bool = True) -> np.ndarray:
    """Row j of every rank's ``arr`` (shape ``(P, ...)``) goes to rank j: ``out[i]`` = rank i's row.

    Pairwise exchange: in round s rank r sends to ``r+s`` and receives from
    ``r-s``: P-1 rounds, ``(P-1)/P·N`` bytes each way per rank, fan-in 1.
    """
    arr = np.asarray(arr)
    check_same_everywhere(c, "alltoall", arr.dtype, None, check, length=arr.size,
                          leading=arr.shape[0] if arr.ndim else -1)
    _check_leading("alltoall", arr, c.size)
    rank, p = c.rank, c.size
    src = np.ascontiguousarray(arr)
    out = np.empty_like(src)
    out[rank] = src[rank]
    for step in range(1, p):
        dest, source = (rank + step) % p, (rank - step) % p
        # communication: my row for `dest` out, `source`'s row for me in
        c.sendrecv(src[dest], dest, out[source], source, TAG, TAG)
    return out


def barrier(c: Communicator) -> None:
    """Dissemination barrier: in round k, signal ``rank + 2^k`` and wait for ``rank - 2^k``.

    After round k a rank has heard, directly or not, from the ``2^(k+1) - 1``
    ranks before it: ``ceil(log2 P)`` rounds of one empty message each.
    """
    rank, p = c.rank, c.size
    token, incoming = np.zeros(0, np.uint8), np.zeros(0, np.uint8)
    distance = 1
    while distance < p:
        # communication: an empty message, meaning "I and all I heard from have arrived"
        c.sendrecv(token, (rank + distance) % p, incoming, (rank - distance) % p, TAG, TAG)
        distance <<= 1
